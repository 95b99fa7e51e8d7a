"""Operators see each provider (issue 40, part 7): ``GET /admin/v1/providers`` and the console's
providers page show its kind, webhook scheme, profile, poll schedule and limits, in the documented
shape, and never a secret; the page shows its refused webhooks by reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from flask import Flask

from app.api.openapi import document
from foundation import metrics
from tests.middle.apps import in_process_app
from tests.middle.test_console import TOKEN, sign_in

ROOT = Path(__file__).resolve().parents[2]
STRIPE_LIKE = str(ROOT / "docs" / "profiles" / "stripe-like.toml")
SECRETS = {
    "standard": "whsec_" + "c3RhbmRhcmQtc2VjcmV0LWZvci10ZXN0cw==",
    "stripe": "whsec_stripe_provider_listing_secret",
    "api_key": "sk_live_provider_listing_key",
    "amqp_password": "amqp-pass-provider-listing",
    "url_password": "url-pass-provider-listing",
}


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    env = {
        "LIAISON_ADMIN_TOKEN": TOKEN,
        "LIAISON_PROVIDERS": "sim,stripe,queue",
        "LIAISON_DEFAULT_PROVIDER": "sim",
        "LIAISON_PROVIDER_SIM_BASE_URL": f"http://demo:{SECRETS['url_password']}@127.0.0.1:9/api?k=v",
        "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": SECRETS["standard"],
        "LIAISON_PROVIDER_SIM_POLL_SCHEDULE_S": "5,15,60",
        "LIAISON_PROVIDER_SIM_API_KEY": SECRETS["api_key"],
        "LIAISON_PROVIDER_STRIPE_KIND": "http",
        "LIAISON_PROVIDER_STRIPE_PROFILE": STRIPE_LIKE,
        "LIAISON_PROVIDER_STRIPE_BASE_URL": "http://127.0.0.1:9",
        "LIAISON_PROVIDER_STRIPE_API_KEY": SECRETS["api_key"],
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SCHEME": "stripe",
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SECRETS": SECRETS["stripe"],
        "LIAISON_PROVIDER_STRIPE_MAX_IN_FLIGHT": "7",
        "LIAISON_PROVIDER_STRIPE_RATE_LIMIT_PER_S": "2.5",
        "LIAISON_PROVIDER_STRIPE_RATE_LIMIT_BURST": "3",
        "LIAISON_PROVIDER_QUEUE_KIND": "amqp",
        "LIAISON_PROVIDER_QUEUE_AMQP_URL": f"amqp://vendor:{SECRETS['amqp_password']}@127.0.0.1:9/",
        "LIAISON_PROVIDER_QUEUE_WEBHOOK_SECRETS": SECRETS["standard"],
    }
    app = in_process_app(migrated_template, tmp_path, **env)
    yield app
    app.extensions["liaison"].db.dispose()


def _admin(app: Flask) -> Any:
    response = app.test_client().get("/admin/v1/providers", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    return response


def _no_secret_in(text: str) -> None:
    for name, secret in SECRETS.items():
        assert secret not in text, name
    assert "c3RhbmRhcmQ" not in text  # nor the standard secret's base64 alone


def test_the_admin_api_lists_each_provider_in_its_documented_shape(app: Flask) -> None:
    response = _admin(app)
    body = response.get_json()
    by_name = {p["name"]: p for p in body["items"]}
    assert list(by_name) == ["queue", "sim", "stripe"]
    sim, stripe, queue = by_name["sim"], by_name["stripe"], by_name["queue"]
    assert (sim["kind"], sim["webhook_scheme"], sim["default"]) == ("rest", "standard-webhooks", True)
    assert sim["base_url"] == "http://127.0.0.1:9/api" and sim["poll_schedule_s"] == [5, 15, 60]
    assert sim["profile"] is None and sim["webhook_secrets"] == 1 and sim["max_in_flight"] == 0
    assert (stripe["kind"], stripe["webhook_scheme"], stripe["profile"]) == ("http", "stripe", STRIPE_LIKE)
    assert (stripe["max_in_flight"], stripe["rate_limit_per_s"], stripe["rate_limit_burst"]) == (7, 2.5, 3)
    assert stripe["poll_schedule_s"] is None and stripe["default"] is False
    assert stripe["refusals_metric"] == 'liaison_webhooks_rejected_total{provider="stripe"}'
    assert (queue["kind"], queue["base_url"], queue["webhook_scheme"]) == ("amqp", None, "standard-webhooks")

    spec = document()
    schema = spec["paths"]["/admin/v1/providers"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    jsonschema_rs.validate({**schema, "components": spec["components"]}, body)
    _no_secret_in(response.text)


def test_the_admin_api_needs_the_admin_token(app: Flask) -> None:
    assert app.test_client().get("/admin/v1/providers").status_code == 401


def test_the_console_shows_each_provider_and_its_refused_webhooks_by_reason(app: Flask) -> None:
    metrics.register_providers(["sim", "stripe", "queue"])
    browser = app.test_client()
    forged = browser.post(
        "/webhooks/stripe",
        data=json.dumps({"id": "evt_1", "type": "job.finished"}),
        headers={"Stripe-Signature": "t=1,v1=00", "Content-Type": "application/json"},
    )
    assert forged.status_code == 401
    refused = metrics.webhook_refusals()["stripe"]
    sign_in(browser)
    page = browser.get("/console/providers")
    assert page.status_code == 200
    html = page.text
    row = html[html.index('id="provider-stripe"') :].split("</tr>")[0]
    assert ">http<" in row and ">stripe<" in row and STRIPE_LIKE in row and "2.5/s, burst 3" in row
    shown = ", ".join(f"{reason}: {n}" for reason, n in sorted(refused.items()))
    assert shown in row and "signature: " in row
    sim_row = html[html.index('id="provider-sim"') :].split("</tr>")[0]
    assert "(default)" in sim_row and "5.0, 15.0, 60.0" in sim_row and ">standard-webhooks<" in sim_row
    assert 'href="/console/providers"' in html  # in the navigation
    _no_secret_in(html)
