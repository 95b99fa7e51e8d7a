"""``POST /webhooks/<provider>`` for an http-kind provider: the vendor's own event shape is read
through its profile's [events] (docs/profiles/stripe-like.toml, signed the Stripe way); a type the
profile does not know is stored, counted and answered 2xx, and changes nothing."""

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
from sqlalchemy import select

from foundation import metrics
from models import ExternalTask, ProcessedMessage
from tests.middle.apps import in_process_app
from tests.middle.builders import at_vendor, new_client, submit

ROOT = Path(__file__).resolve().parents[2]
STRIPE_LIKE = ROOT / "docs" / "profiles" / "stripe-like.toml"
SECRET = "whsec_vendor"
S = "LIAISON_PROVIDER_SIM_"


def _app(migrated_template: Path, tmp_path: Path, profile: Path) -> Flask:
    env = {
        S + "KIND": "http",
        S + "PROFILE": str(profile),
        S + "WEBHOOK_SCHEME": "stripe",
        S + "WEBHOOK_SECRETS": SECRET,
    }
    return in_process_app(migrated_template, tmp_path, **env)


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    app = _app(migrated_template, tmp_path, STRIPE_LIKE)
    with app.extensions["liaison"].db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job_7")
    yield app
    app.extensions["liaison"].db.dispose()


def _post(app: Flask, event: dict[str, Any]) -> tuple[int, Any]:
    body = json.dumps(event).encode()
    signature = stripe.WebhookSignature.generate_signature_header(body.decode(), SECRET, int(time.time()))
    response = app.test_client().post(
        "/webhooks/sim", data=body, headers={"Stripe-Signature": signature, "Content-Type": "application/json"}
    )
    return response.status_code, response.get_json()


def _event(event_id: str, type_: str, **obj: Any) -> dict[str, Any]:
    return {"id": event_id, "type": type_, "data": {"object": obj}}


def _state(app: Flask) -> tuple[str, Any, list[str]]:
    with app.extensions["liaison"].db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == "order-1")).one()
        inbox = session.scalars(select(ProcessedMessage.message_type).order_by(ProcessedMessage.id)).all()
        return str(task.state), task.outcome, list(inbox)


def _ignored(reason: str) -> float:
    return REGISTRY.get_sample_value("liaison_webhooks_ignored_total", {"provider": "sim", "reason": reason}) or 0.0


def test_the_vendors_events_move_the_task(app: Flask) -> None:
    assert _post(app, _event("evt_1", "job.started", id="job_7")) == (200, {"status": "applied", "message_id": "evt_1"})
    assert _state(app)[0] == "accepted"
    status, answer = _post(app, _event("evt_2", "job.finished", id="job_7", state="DONE", result={"url": "u"}))
    assert (status, answer["status"]) == (200, "applied")
    assert _state(app)[:2] == ("succeeded", {"url": "u"})


def test_an_unknown_type_is_stored_counted_and_ignored(app: Flask) -> None:
    metrics.register_providers(["sim"])
    before = _ignored("unknown_type")
    event = _event("evt_3", "invoice.paid", id="job_7", state="DONE")
    assert _post(app, event) == (200, {"status": "ignored", "message_id": "evt_3"})
    assert _state(app) == ("submitted", None, ["ignored:invoice.paid"])
    assert _ignored("unknown_type") == before + 1
    assert _post(app, event)[1]["status"] == "duplicate"  # stored: its resend is known
    assert _ignored("unknown_type") == before + 1


def test_an_event_the_profile_cannot_read_is_a_400(app: Flask) -> None:
    status, _ = _post(app, _event("evt_4", "job.finished", id="job_7", state="WHO_KNOWS"))
    assert status == 400
    assert _state(app) == ("submitted", None, [])


def test_an_event_may_name_our_reference(migrated_template: Path, tmp_path: Path) -> None:
    """``events.reference``: the task is found by our reference; unknown → ignored, not yet bound → 409."""
    text = STRIPE_LIKE.read_text().replace('job_id = "/data/object/id"', 'reference = "/data/object/metadata/ref"')
    profile = tmp_path / "by-reference.toml"
    profile.write_text(text)
    app = _app(migrated_template, tmp_path, profile)
    with app.extensions["liaison"].db.transaction() as session:
        client = new_client(session)
        bound = at_vendor(session, client, "order-1", "job_7")
        unbound = submit(session, client, "order-2").task
        refs = bound.reference, unbound.reference
    assert _post(app, _event("evt_1", "job.started", metadata={"ref": refs[0]}))[1]["status"] == "applied"
    assert _state(app)[0] == "accepted"
    assert _post(app, _event("evt_2", "job.started", metadata={"ref": refs[1]}))[0] == 409
    assert _post(app, _event("evt_3", "job.started", metadata={"ref": "nobody"}))[1]["status"] == "ignored"
    app.extensions["liaison"].db.dispose()


def test_a_broken_profile_stops_the_start_naming_file_and_key(migrated_template: Path, tmp_path: Path) -> None:
    from foundation.options import ConfigError

    profile = tmp_path / "broken.toml"
    profile.write_text(STRIPE_LIKE.read_text().replace('path = "/v1/jobs/{job_id}"', 'path = "/v1/jobs/{job}"'))
    with pytest.raises(ConfigError, match=rf"^{S}PROFILE: {profile}: status.path: unknown variable \{{job\}}"):
        _app(migrated_template, tmp_path, profile)
