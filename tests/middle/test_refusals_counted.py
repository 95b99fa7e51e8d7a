"""Every way the new inbound schemes, profiles and hints refuse a vendor request is counted in
``liaison_webhooks_rejected_total`` under the provider it was meant for and the documented reason
(docs/observability.md), and under no other provider: what the console's Providers page and an
alert on ``{provider, reason}`` read."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe
from flask import Flask
from prometheus_client import REGISTRY

from foundation import metrics
from tests.middle.apps import in_process_app

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_refusals_counted"
PROVIDERS = ("sim", "stripe", "tok", "hint")
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def app(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    env = {
        "LIAISON_PROVIDERS": ",".join(PROVIDERS),
        "LIAISON_DEFAULT_PROVIDER": "sim",
        "LIAISON_PROVIDER_STRIPE_KIND": "http",
        "LIAISON_PROVIDER_STRIPE_PROFILE": str(ROOT / "docs" / "profiles" / "stripe-like.toml"),
        "LIAISON_PROVIDER_STRIPE_BASE_URL": "http://127.0.0.1:9",
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SCHEME": "stripe",
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SECRETS": SECRET,
        "LIAISON_PROVIDER_TOK_BASE_URL": "http://127.0.0.1:9",
        "LIAISON_PROVIDER_TOK_WEBHOOK_SCHEME": "token-url",
        "LIAISON_PROVIDER_HINT_BASE_URL": "http://127.0.0.1:9",
        "LIAISON_PROVIDER_HINT_WEBHOOK_SCHEME": "confirm",
        "LIAISON_PROVIDER_HINT_POLL_SCHEDULE_S": "5",
        "LIAISON_MAX_BODY_BYTES": "4096",
    }
    app = in_process_app(migrated_template, tmp_path_factory.mktemp("refusals"), **env)
    metrics.register_providers(PROVIDERS)
    yield app
    app.extensions["liaison"].db.dispose()


def _stripe_headers(body: str, at: float | None = None) -> dict[str, str]:
    at = time.time() if at is None else at
    return {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body, SECRET, int(at)), **JSON}


def _event(**fields: Any) -> str:
    return json.dumps({"type": "job.finished", "data": {"object": {"id": "job_1", "state": "DONE"}}, **fields})


#: headers signed when the test runs, not when it is collected: a signature made at import is stale
#: by the time a long run (xdist's other tests first) sends it
SIGNED_NOW: dict[str, str] = {}
UNMAPPED = _event(id="evt_3", data={"object": {"id": "job_1", "state": "WHO_KNOWS"}})
#: (provider, reason, path, body, headers): one refused request each.
CASES: list[tuple[str, str, str, str, dict[str, str]]] = [
    ("stripe", "signature", "/webhooks/stripe", _event(id="evt_1"), {"Stripe-Signature": "t=1,v1=00", **JSON}),
    ("stripe", "stale", "/webhooks/stripe", _event(id="evt_2"), _stripe_headers(_event(id="evt_2"), 1_000_000)),
    ("stripe", "malformed", "/webhooks/stripe", _event(), SIGNED_NOW),  # no event id at /id
    ("stripe", "malformed", "/webhooks/stripe", UNMAPPED, SIGNED_NOW),  # a status [statuses] lacks
    ("stripe", "unsupported_media_type", "/webhooks/stripe", _event(id="evt_4"), {"Content-Type": "text/plain"}),
    ("stripe", "too_large", "/webhooks/stripe", _event(id="evt_5", pad="x" * 5000), _stripe_headers("{}")),
    ("tok", "signature", "/webhooks/tok/t/" + "a" * 43, json.dumps({"type": "job.accepted", "job_id": "j"}), JSON),
    ("tok", "signature", "/webhooks/tok", json.dumps({"type": "job.accepted", "job_id": "j"}), JSON),  # no token
    ("sim", "signature", "/webhooks/sim/t/" + "a" * 43, json.dumps({"type": "job.accepted", "job_id": "j"}), JSON),
    ("hint", "malformed", "/webhooks/hint", json.dumps({"job": "no job_id here"}), JSON),
    ("hint", "malformed", "/webhooks/hint", json.dumps({"job_id": "\x01bad"}), JSON),
]


def _counts() -> dict[tuple[str, str], float]:
    return {
        (labels["provider"], labels["reason"]): value
        for labels, value in metrics.sample_values("liaison_webhooks_rejected_total")
    }


@pytest.mark.parametrize(("provider", "reason", "path", "body", "headers"), CASES)
def test_each_refusal_is_counted_under_its_provider_and_reason(
    app: Flask, provider: str, reason: str, path: str, body: str, headers: dict[str, str]
) -> None:
    if headers is SIGNED_NOW:
        headers = _stripe_headers(body)
    before = _counts()
    response = app.test_client().post(path, data=body.encode(), headers=headers)
    assert 400 <= response.status_code < 500, response.text
    after = _counts()
    changed = {key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key, 0.0)}
    assert changed == {(provider, reason): 1.0}
    assert REGISTRY.get_sample_value("liaison_webhooks_rejected_total", {"provider": provider, "reason": reason})


def test_an_unknown_provider_is_counted_too(app: Flask) -> None:
    before = _counts().get(("other", "unknown_provider"), 0.0)
    assert app.test_client().post("/webhooks/nobody", data=b"{}", headers=JSON).status_code == 404
    assert _counts()[("other", "unknown_provider")] == before + 1
