"""What schemathesis found at the API's edge, pinned in fast tests (no database is reached: each is
refused before)."""

from __future__ import annotations

import pytest
from flask import Flask

from app import create_app
from app.errors import PROBLEM
from foundation.settings import Settings

TOKEN = "edge-admin-token-" + "x" * 32
ENV = {"DATABASE_URL": "sqlite:///:memory:", "CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "LIAISON_ADMIN_TOKEN": TOKEN}
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def app() -> Flask:
    return create_app(Settings.from_env(ENV))


def test_a_405_names_the_allowed_methods(app: Flask) -> None:
    response = app.test_client().delete("/api/v1/tasks")
    assert response.status_code == 405 and response.mimetype == PROBLEM
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "POST"}


def test_an_incident_note_must_be_a_string(app: Flask) -> None:
    response = app.test_client().post("/admin/v1/incidents/1/resolve", json={"note": {}}, headers=ADMIN)
    assert response.status_code == 422
    assert response.get_json()["errors"] == [{"field": "note", "message": "a string"}]


@pytest.mark.parametrize("value", ["5", 5.5, True])
def test_replay_filters_in_a_body_are_json_integers(app: Flask, value: object) -> None:
    for field in ("older_than_s", "newer_than_s", "limit"):
        response = app.test_client().post("/admin/v1/dead-letters/replay", json={field: value}, headers=ADMIN)
        assert response.status_code == 422, (field, value)
        assert response.get_json()["errors"][0]["field"] == field


def test_a_missing_bearer_token_names_the_credential_each_route_takes() -> None:
    """``/readyz`` and ``/metrics`` take the metrics token, ``/admin/v1`` the admin token, ``/api/v1``
    a client's API key: a 401 without one says which (issue 22)."""
    metrics_token = "edge-metrics-token-" + "m" * 32
    client = create_app(Settings.from_env({**ENV, "LIAISON_METRICS_TOKEN": metrics_token})).test_client()
    for path, credential in (
        ("/readyz", "LIAISON_METRICS_TOKEN"),
        ("/metrics", "LIAISON_METRICS_TOKEN"),
        ("/admin/v1/incidents", "LIAISON_ADMIN_TOKEN"),
        ("/api/v1/tasks", "API key"),
    ):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.get_json()["detail"] == f"send Authorization: Bearer <{credential}>", path
