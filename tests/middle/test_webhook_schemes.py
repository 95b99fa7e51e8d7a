"""``POST /webhooks/<provider>`` under each signing scheme (``LIAISON_PROVIDER_<NAME>_WEBHOOK_SCHEME``),
through the whole app in-process: a request signed the vendor's way is applied once (its replay is a
duplicate); forged, stale, oversized and malformed ones get 401/400/413 and store nothing. Stripe's
headers are made by the ``stripe`` package, GitHub's checked against its published vector."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import stripe
from flask import Flask
from sqlalchemy import func, select

from models import ExternalTask, ProcessedMessage
from tests.middle.apps import in_process_app
from tests.middle.builders import at_vendor, new_client
from webhooks.signing import generate_secret, sign

Signer = Callable[[bytes, float], dict[str, str]]
GITHUB_SECRET = "It's a Secret to Everybody"
STRIPE_SECRET = "whsec_not-base64-at-all"
HMAC_SECRET = "shared secret of the vendor"
WHSEC = generate_secret()


@dataclass(frozen=True)
class Case:
    env: dict[str, str]
    sign: Signer  # (body, timestamp) -> headers, signed with the configured secret
    forge: Signer  # the same, with another secret
    has_timestamp: bool
    signs_body: bool = True  # basic proves who sends, not what: a changed body is not caught by it


def _stripe(secret: str) -> Signer:
    def signer(body: bytes, ts: float) -> dict[str, str]:
        return {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body.decode(), secret, int(ts))}

    return signer


def _github(secret: str) -> Signer:
    def signer(body: bytes, ts: float) -> dict[str, str]:
        mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return {"X-Hub-Signature-256": f"sha256={mac}", "X-GitHub-Delivery": hashlib.md5(body).hexdigest()}

    return signer


def _hmac(secret: str) -> Signer:
    def signer(body: bytes, ts: float) -> dict[str, str]:
        stamp = str(int(ts))
        mac = hmac.new(secret.encode(), stamp.encode() + b":" + body, hashlib.sha512).digest()
        return {"X-Vendor-Sig": "v1=" + base64.b64encode(mac).decode(), "X-Vendor-Time": stamp}

    return signer


def _basic(pair: str) -> Signer:
    return lambda body, ts: {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def _standard(secret: str) -> Signer:
    return lambda body, ts: sign(secret, "msg-" + hashlib.sha256(body).hexdigest()[:16], int(ts), body).as_dict()


S = "LIAISON_PROVIDER_SIM_"
CASES = {
    "standard-webhooks": Case({S + "WEBHOOK_SECRETS": WHSEC}, _standard(WHSEC), _standard(generate_secret()), True),
    "stripe": Case(
        {S + "WEBHOOK_SCHEME": "stripe", S + "WEBHOOK_SECRETS": f"whsec_old,{STRIPE_SECRET}"},
        _stripe(STRIPE_SECRET),
        _stripe("whsec_forged"),
        True,
    ),
    "github": Case(
        {S + "WEBHOOK_SCHEME": "github", S + "WEBHOOK_SECRETS": GITHUB_SECRET},
        _github(GITHUB_SECRET),
        _github("It's a Secret to Nobody"),
        False,
    ),
    "hmac": Case(
        {
            S + "WEBHOOK_SCHEME": "hmac",
            S + "WEBHOOK_SECRETS": HMAC_SECRET,
            S + "WEBHOOK_HMAC_HEADER": "X-Vendor-Sig",
            S + "WEBHOOK_HMAC_ALGORITHM": "sha512",
            S + "WEBHOOK_HMAC_ENCODING": "base64",
            S + "WEBHOOK_HMAC_PREFIX": "v1=",
            S + "WEBHOOK_HMAC_SIGNED_CONTENT": "timestamp-body",
            S + "WEBHOOK_HMAC_SEPARATOR": ":",
            S + "WEBHOOK_HMAC_TIMESTAMP_HEADER": "X-Vendor-Time",
        },
        _hmac(HMAC_SECRET),
        _hmac("guessed"),
        True,
    ),
    "basic": Case(
        {S + "WEBHOOK_SCHEME": "basic", S + "WEBHOOK_SECRETS": "vendor:pa55word-old,vendor:pa55word"},
        _basic("vendor:pa55word"),
        _basic("vendor:guessed"),
        False,
        signs_body=False,
    ),
}


@pytest.fixture(params=sorted(CASES))
def scheme(request: pytest.FixtureRequest, migrated_template: Path, tmp_path: Path) -> Iterator[tuple[Flask, Case]]:
    case = CASES[request.param]
    app = in_process_app(migrated_template, tmp_path, **case.env)
    with app.extensions["liaison"].db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
    yield app, case
    app.extensions["liaison"].db.dispose()


def _body(event_id: str = "evt_1", **extra: object) -> bytes:
    return json.dumps({"id": event_id, "type": "job.accepted", "job_id": "job-1", **extra}).encode()


def _post(app: Flask, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    response = app.test_client().post(
        "/webhooks/sim", data=body, headers={**headers, "Content-Type": "application/json"}
    )
    return response.status_code, response.get_json()


def _stored(app: Flask) -> tuple[int, str]:
    with app.extensions["liaison"].db.transaction() as session:
        count = session.scalar(select(func.count()).select_from(ProcessedMessage)) or 0
        state = session.scalar(select(ExternalTask.state).where(ExternalTask.correlation_id == "order-1"))
        return count, str(state)


def test_a_signed_event_is_applied_once_and_its_replay_is_a_duplicate(scheme: tuple[Flask, Case]) -> None:
    app, case = scheme
    body = _body()
    status, answer = _post(app, body, case.sign(body, time.time()))
    assert (status, answer["status"]) == (200, "applied")
    assert _stored(app) == (1, "accepted")
    status, answer = _post(app, body, case.sign(body, time.time()))
    assert (status, answer["status"]) == (200, "duplicate")
    assert _stored(app)[0] == 1


def test_forged_tampered_unsigned_stale_oversized_malformed_store_nothing(scheme: tuple[Flask, Case]) -> None:
    app, case = scheme
    body, now = _body(), time.time()
    refusals = [
        (case.forge(body, now), body, 401),
        ({}, body, 401),
        ({k: v + "x" for k, v in case.sign(body, now).items()}, body, 401),
    ]
    if case.signs_body:
        refusals.append((case.sign(body, now), _body(outcome=None), 401))  # another body than the one signed
    if case.has_timestamp:
        refusals += [(case.sign(body, now - 400), body, 401), (case.sign(body, now + 400), body, 401)]
    big = _body(outcome={"blob": "x" * app.extensions["liaison"].settings.max_body_bytes})
    malformed = json.dumps({"id": "evt_2", "type": "job.exploded", "job_id": "job-1"}).encode()
    refusals += [(case.sign(big, now), big, 413), (case.sign(malformed, now), malformed, 400)]
    for headers, sent, expected in refusals:
        status, _ = _post(app, sent, headers)
        assert status == expected, (headers, sent[:60])
    assert _stored(app) == (0, "submitted")


def test_the_event_id_source_is_the_profiles(migrated_template: Path, tmp_path: Path) -> None:
    """Stripe's default is the body's ``/id``: two deliveries of one event are one; a body without
    an id is a 400 (proven, but it cannot be deduplicated), not a 401."""
    app = in_process_app(migrated_template, tmp_path, **CASES["stripe"].env)
    with app.extensions["liaison"].db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
    sign_ = CASES["stripe"].sign
    first, again = _body("evt_9"), _body("evt_9", outcome=None)  # one event id, a re-serialised body
    assert _post(app, first, sign_(first, time.time()))[1]["status"] == "applied"
    assert _post(app, again, sign_(again, time.time()))[1]["status"] == "duplicate"
    no_id = json.dumps({"type": "job.accepted", "job_id": "job-1"}).encode()
    assert _post(app, no_id, sign_(no_id, time.time()))[0] == 400
    assert _stored(app)[0] == 1
    app.extensions["liaison"].db.dispose()


def test_a_confirm_hint_is_never_applied(migrated_template: Path, tmp_path: Path) -> None:
    """A ``confirm`` provider's unsigned body changes nothing: it is a hint, answered 202 with a
    status check of its job written (tests/middle/test_confirm_hints.py), never applied."""
    app = in_process_app(migrated_template, tmp_path, LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME="confirm")
    ctx = app.extensions["liaison"]
    with ctx.db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
    assert _post(app, _body(), {})[0] == 202
    assert _stored(app) == (0, "submitted")
    ctx.db.dispose()


def test_githubs_published_vector_passes_the_signature_check(migrated_template: Path, tmp_path: Path) -> None:
    """GitHub's documented example (a body that is no event of ours) gets past the signature: 400,
    the body's fault; one byte changed is a 401."""
    app = in_process_app(migrated_template, tmp_path, **CASES["github"].env)
    headers = {
        "X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        "X-GitHub-Delivery": "d-1",
    }
    assert _post(app, b"Hello, World!", headers)[0] == 400
    assert _post(app, b"Hello, World?", headers)[0] == 401
    app.extensions["liaison"].db.dispose()
