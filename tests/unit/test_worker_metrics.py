"""A worker's metrics port (app.observability.worker_metrics), as a WSGI app: the web's token rules
and exposition, no network (werkzeug's test client calls the app directly). Listening and the
shared-port case run on real sockets in tests/integration/test_worker_metrics_hosts.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from app.observability import worker_metrics
from foundation import metrics
from foundation.settings import Settings

TOKEN = "worker-metrics-token-" + "t" * 32


@pytest.fixture
def client() -> Client:
    return Client(worker_metrics.wsgi_app(TOKEN))


def test_a_scrape_with_the_token_gets_the_prometheus_exposition(client: Client) -> None:
    metrics.register_providers(["acme"])
    metrics.submission("acme", "submitted")
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.headers["Content-Type"] == metrics.CONTENT_TYPE_LATEST
    names = {family.name for family in text_string_to_metric_families(response.get_data(as_text=True))}
    assert {"liaison_submissions", "liaison_relay_deliveries"} <= names


@pytest.mark.parametrize(
    "headers, detail",
    [
        ({}, "send Authorization: Bearer"),
        ({"Authorization": "Bearer not-the-token"}, "bad metrics token"),
        ({"Authorization": f"Basic {TOKEN}"}, "send Authorization: Bearer"),
        ({"Authorization": f"Bearer {TOKEN}x"}, "bad metrics token"),
    ],
)
def test_without_the_token_a_scrape_is_refused_as_on_the_web(
    client: Client, headers: dict[str, str], detail: str
) -> None:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json is not None
    assert detail in response.json["detail"] and "liaison_" not in response.get_data(as_text=True)


def test_only_metrics_is_served(client: Client) -> None:
    response = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.json is not None
    assert response.status_code == 404 and response.json["title"] == "Not Found"


def test_without_a_configured_token_nothing_is_served() -> None:
    """Settings refuse a port without a token; should one get here anyway, it is the web's 404."""
    response = Client(worker_metrics.wsgi_app("")).get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 404


def test_nothing_listens_unless_a_port_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_metrics, "_server", None)
    sender = SimpleNamespace(app=SimpleNamespace(flask_app=SimpleNamespace(extensions={})))
    sender.app.flask_app.extensions["liaison"] = SimpleNamespace(settings=Settings.from_env({}))
    worker_metrics._on_worker_ready(sender=sender)
    assert worker_metrics._server is None
    worker_metrics._on_worker_ready(sender=object())  # no Celery app of ours: nothing to do
    assert worker_metrics._server is None
