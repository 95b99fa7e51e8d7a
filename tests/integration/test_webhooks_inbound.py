"""Inbound webhooks: every malformed request gets its 4xx and stores nothing; orphans are kept."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from models import ExternalTask, OrphanEvent, ProcessedMessage, TaskEvent
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event
from webhooks.signing import generate_secret, sign

EVENT = {"type": "job.accepted", "job_id": "job_unknown"}


def _stored(stack: Stack) -> int:
    with stack.db.transaction() as session:
        count = session.scalar(select(func.count()).select_from(ProcessedMessage))
        assert count is not None
        return count


def _post(stack: Stack, body: bytes, headers: dict[str, str], provider: str = "sim") -> requests.Response:
    return requests.post(f"{stack.web.url}/webhooks/{provider}", data=body, headers=headers, timeout=5)


def _signed(secret: str, body: bytes, ts: float | None = None) -> dict[str, str]:
    headers = sign(secret, f"msg_{uuid.uuid4().hex}", int(ts or time.time()), body).as_dict()
    return {**headers, "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "case, status",
    [
        ("wrong_secret", 401),
        ("no_signature", 401),
        ("garbage_signature", 401),
        ("stale", 401),
        ("future", 401),
        ("unknown_provider", 404),
        ("not_json_type", 415),
        ("broken_json", 400),
        ("bad_event", 400),
        ("too_large", 413),
    ],
)
def test_malformed_webhooks_get_their_4xx_and_store_nothing(
    pair_stack: Stack, vendor_secret: str, case: str, status: int
) -> None:
    body = json.dumps(EVENT).encode()
    headers = _signed(vendor_secret, body)
    provider = "sim"
    if case == "wrong_secret":
        headers = _signed(generate_secret(), body)
    elif case == "no_signature":
        del headers["webhook-signature"]
    elif case == "garbage_signature":
        headers["webhook-signature"] = "v1,%%%not-base64 v2 ,,,"
    elif case == "stale":
        headers = _signed(vendor_secret, body, time.time() - 301)
    elif case == "future":
        # a minute past the 300 s tolerance (at 301 s, a loaded machine took over a second to check it)
        headers = _signed(vendor_secret, body, time.time() + 360)
    elif case == "unknown_provider":
        provider = "nobody"
    elif case == "not_json_type":
        headers["Content-Type"] = "text/plain"
    elif case == "broken_json":
        body = b"{not json"
        headers = _signed(vendor_secret, body)
    elif case == "bad_event":
        body = json.dumps({"type": "job.exploded", "job_id": "x"}).encode()
        headers = _signed(vendor_secret, body)
    elif case == "too_large":
        body = json.dumps({**EVENT, "outcome": {"blob": "x" * pair_stack.settings.max_body_bytes}}).encode()
        headers = _signed(vendor_secret, body)
    before = _stored(pair_stack)
    response = _post(pair_stack, body, headers, provider)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert _stored(pair_stack) == before


def test_event_for_an_unknown_job_is_kept_as_an_orphan(pair_stack: Stack, vendor_secret: str) -> None:
    job_id = f"job_{uuid.uuid4().hex}"
    response = post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id})
    assert response.status_code == 200 and response.json()["status"] == "orphan"
    with pair_stack.db.transaction() as session:
        orphan = session.scalars(select(OrphanEvent).where(OrphanEvent.vendor_job_id == job_id)).one()
        assert orphan.state == "open" and orphan.payload["type"] == "job.accepted"
    again = post_event(
        pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id}, message_id=orphan.message_id
    )
    assert again.json()["status"] == "duplicate"


def _malformed_count(stack: Stack) -> float:
    """``liaison_webhooks_rejected_total{provider="sim", reason="malformed"}`` from /metrics."""
    text = stack.internal("/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "liaison_webhooks_rejected_total" and sample.labels == {
                "provider": "sim",
                "reason": "malformed",
            }:
                return sample.value
    return 0.0


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"type": "job.accepted", "job_id": "j", "n": ' + b"1" * 4301 + b"}", id="int-past-4300-digits"),
        pytest.param(b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": NaN}}', id="NaN"),
        pytest.param(
            b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": Infinity}}', id="Infinity"
        ),
        pytest.param(
            b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": -1e400}}',
            id="overflows-to-inf",
        ),
        pytest.param(b'{"type": "job.accepted", "job_id": "\\ud800"}', id="lone-surrogate-job-id"),
        pytest.param(b'{"type": "job.accepted", "job_id": "j\\u0000"}', id="nul-job-id"),
        pytest.param(
            b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"e": "\\u0000"}}',
            id="nul-in-outcome",
        ),
        pytest.param(b"[" * 100_000, id="nested-too-deeply"),
    ],
)
def test_unstorable_json_is_a_malformed_webhook(pair_stack: Stack, vendor_secret: str, body: bytes) -> None:
    """Signed, but JSON the database could not store: 400 as a malformed body, counted, nothing stored."""
    before, malformed = _stored(pair_stack), _malformed_count(pair_stack)
    response = _post(pair_stack, body, _signed(vendor_secret, body))
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert _stored(pair_stack) == before
    assert _malformed_count(pair_stack) == malformed + 1


def test_webhook_id_with_a_nul_byte_is_malformed(pair_stack: Stack, vendor_secret: str) -> None:
    body = json.dumps(EVENT).encode()
    signed = sign(vendor_secret, "msg_a\x00b", int(time.time()), body).as_dict()
    headers = {**signed, "Content-Type": "application/json"}
    before = _stored(pair_stack)
    response = _post(pair_stack, body, headers)
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert _stored(pair_stack) == before


def test_a_duplicate_for_a_known_task_changes_nothing_and_is_noted_on_its_timeline(
    pair_stack: Stack, vendor_secret: str
) -> None:
    """The inbox and the task are found in one statement on PostgreSQL: a duplicate must still be
    told apart from the first delivery, and noted on the task it names."""
    stack = pair_stack
    api_key, _, _ = stack.new_client()
    cid = f"dup-{uuid.uuid4().hex[:8]}"
    silent = {"drop": ["job.accepted", "job.completed"]}
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": silent}}).status_code == 202
    stack.wait_for_task(api_key, cid, until=lambda body: body["state"] == "submitted")
    with stack.db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == cid)).one()
        job_id, task_id = task.vendor_job_id, task.id
    body = {"type": "job.accepted", "job_id": job_id, "status": "accepted"}
    first = post_event(stack.web.url, vendor_secret, body)
    assert first.json()["status"] == "applied"
    again = post_event(stack.web.url, vendor_secret, body, message_id=first.json()["message_id"])
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    with stack.db.transaction() as session:
        kinds = session.scalars(select(TaskEvent.kind).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id))
        assert [k for k in kinds if k.startswith(("state.", "event."))][-2:] == ["state.accepted", "event.duplicate"]
        assert session.get_one(ExternalTask, task_id).state == "accepted"
