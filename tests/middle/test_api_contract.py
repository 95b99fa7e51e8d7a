"""The API in-process (Flask's test client, SQLite) where its answers follow from what the OpenAPI
document says it enforces (issue 22): what is refused for the server's state rather than the
request's form is a 409, not a 422 (a cancel's key reused on another task; callback origins a
client may not hold); every ``next_cursor`` is one the document's pattern allows, and taking one
back pages on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.api.openapi import document
from app.errors import PROBLEM
from service.credentials import create_client
from tests.middle.apps import in_process_app

ADMIN_TOKEN = "contract-admin-token-" + "a" * 32
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    app = in_process_app(migrated_template, tmp_path, LIAISON_ADMIN_TOKEN=ADMIN_TOKEN)
    yield app
    app.extensions["liaison"].db.dispose()


@pytest.fixture
def api(app: Flask) -> tuple[FlaskClient, dict[str, str]]:
    with app.extensions["liaison"].db.transaction() as session:
        _, key, _ = create_client(session, "shop", "https://shop.example/cb", ("https://shop.example",))
    return app.test_client(), {"Authorization": f"Bearer {key.api_key}"}


def _submit(client: FlaskClient, auth: dict[str, str], correlation_id: str) -> None:
    response = client.post("/api/v1/tasks", json={"input": {"n": 1}, "correlation_id": correlation_id}, headers=auth)
    assert response.status_code == 202, response.text


def test_a_cancel_key_reused_on_another_task_is_a_409_naming_the_key(api: tuple[FlaskClient, dict[str, str]]) -> None:
    client, auth = api
    for cid in ("first", "second"):
        _submit(client, auth, cid)
    keyed = {**auth, "Idempotency-Key": "cancel-key-1"}
    assert client.post("/api/v1/tasks/first/cancel", headers=keyed).status_code == 202
    assert client.post("/api/v1/tasks/first/cancel", headers=keyed).status_code == 202  # the same request again
    reused = client.post("/api/v1/tasks/second/cancel", headers=keyed)
    assert reused.status_code == 409 and reused.mimetype == PROBLEM
    assert [e["field"] for e in reused.get_json()["errors"]] == ["Idempotency-Key"]
    assert client.get("/api/v1/tasks/second", headers=auth).get_json()["state"] == "requested"  # untouched


def test_every_next_cursor_matches_the_documented_pattern_and_pages_on(api: tuple[FlaskClient, dict[str, str]]) -> None:
    client, auth = api
    for i in range(3):
        _submit(client, auth, f"task-{i}")
    (param,) = [p for p in document()["paths"]["/api/v1/tasks"]["get"]["parameters"] if p["name"] == "cursor"]
    first = client.get("/api/v1/tasks?limit=2", headers=auth).get_json()
    assert re.fullmatch(param["schema"]["pattern"], first["next_cursor"])
    rest = client.get(f"/api/v1/tasks?limit=2&cursor={first['next_cursor']}", headers=auth).get_json()
    assert [t["correlation_id"] for t in rest["tasks"]] == ["task-0"] and rest["next_cursor"] is None
    assert client.get("/api/v1/tasks?cursor=t1", headers=auth).get_json()["tasks"] == []  # allowed: an empty page
    assert client.get("/api/v1/tasks?cursor=dDE", headers=auth).status_code == 400  # not the documented form
    assert len(client.get("/api/v1/tasks?cursor=", headers=auth).get_json()["tasks"]) == 3  # empty: the first page
    assert re.fullmatch(param["schema"]["pattern"], "")


def test_origins_a_client_may_not_hold_are_a_409_and_an_origin_of_another_form_a_422(
    api: tuple[FlaskClient, dict[str, str]],
) -> None:
    client, _ = api
    url = "/admin/v1/clients/shop/origins"
    outside = client.post(
        url, json={"add": ["https://other.example"], "remove": ["https://shop.example"]}, headers=ADMIN
    )
    assert outside.status_code == 409 and "default callback_url" in outside.get_json()["detail"]
    assert [e["field"] for e in outside.get_json()["errors"]] == ["origin"]
    many = [f"https://m{i}.example" for i in range(20)]
    assert client.post(url, json={"add": many}, headers=ADMIN).status_code == 409  # 21 with shop.example
    assert client.post(url, json={"add": many[:19]}, headers=ADMIN).status_code == 200  # 20: the most
    gone = [f"https://gone{i}.example" for i in range(30)]  # removing what is not there: nothing to refuse
    assert client.post(url, json={"remove": gone}, headers=ADMIN).status_code == 200
    malformed = client.post(url, json={"add": ["ftp://x"]}, headers=ADMIN)
    assert malformed.status_code == 422 and [e["field"] for e in malformed.get_json()["errors"]] == ["origin"]
