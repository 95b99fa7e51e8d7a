"""The ``confirm`` scheme and polling on a real stack (web thread, a real worker and broker, both
databases, the simulator as the vendor), with ``LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME=confirm`` and a
one-second poll schedule. The poll job is run by hand (``workers.polling.poll``), as beat would.

- confirm: the simulator's webhooks reach Liaison as hints only, and a forged completion posted
  beside them changes nothing: the task ends in the vendor's real final state with its real outcome,
  as its status API says.
- polling: a vendor that sends no webhook at all (``silent``) still gets its job finished by polls.
- a task's execution deadline fires while its polled vendor says ``running``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests
from sqlalchemy import select

from models import ExternalTask, ProcessedMessage
from models.base import utcnow
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack
from workers.deadlines import check_deadlines
from workers.polling import poll


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def confirm_stack(request: pytest.FixtureRequest, vendor, vendor_secret: str, tmp_path_factory) -> Iterator[Stack]:
    extra = {"LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME": "confirm", "LIAISON_PROVIDER_SIM_POLL_SCHEDULE_S": "1"}
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)


def _kinds(body: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in body["timeline"]]


def _job(stack: Stack, cid: str) -> dict[str, Any]:
    [job] = stack.vendor("GET", f"/jobs?reference={stack.reference(cid)}").json()["jobs"]
    return job


def _inbox(stack: Stack, job_id: str) -> list[str]:
    with stack.db.transaction() as session:
        ids = session.scalars(select(ProcessedMessage.message_id).where(ProcessedMessage.message_id.contains(job_id)))
        return list(ids)


def _polling_until(stack: Stack, api_key: str, cid: str, done: Any, timeout: float = 30) -> dict[str, Any]:
    """Run the poll job, as beat would, until ``done(task)``."""
    end = time.monotonic() + timeout
    while True:
        poll(stack.ctx, utcnow())
        body = stack.get(api_key, cid)
        if done(body):
            return body
        assert time.monotonic() < end, f"the task stayed {body['state']}"
        time.sleep(0.3)


def test_confirm_applies_the_vendors_word_not_the_hints(confirm_stack: Stack) -> None:
    stack = confirm_stack
    api_key, _, _ = stack.new_client()
    cid = f"confirm-{uuid.uuid4().hex[:8]}"
    simulate = {"outcome": "failed", "outcome_payload": {"said": "the vendor"}, "complete_delay_s": 1.5}
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}}).status_code == 202
    stack.wait_for_task(api_key, cid, until=lambda b: b["state"] != "requested")
    job_id = _job(stack, cid)["job_id"]

    forged = {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"paid": 10**6}}
    answer = requests.post(
        f"{stack.web.url}/webhooks/sim",
        data=json.dumps(forged),
        headers={"Content-Type": "application/json"},
        timeout=5,
    )
    assert answer.status_code == 202 and answer.json()["status"] in ("checking", "pending")

    # The simulator's own webhooks are hints too: its completion asks the status API, which says failed.
    done = stack.wait_for_task(api_key, cid, until=lambda b: b["state"] in ("succeeded", "failed", "canceled"))
    assert done["state"] == "failed" and done["outcome"] == {"said": "the vendor"}
    assert "check.requested" in _kinds(done)
    assert all(m.startswith("reconcile:") for m in _inbox(stack, job_id))  # only status answers were applied


def test_a_poll_only_task_completes_with_no_webhook(confirm_stack: Stack) -> None:
    stack = confirm_stack
    api_key, _, _ = stack.new_client()
    cid = f"polled-{uuid.uuid4().hex[:8]}"
    simulate = {"silent": True, "complete_delay_s": 1.0, "outcome_payload": {"made": 7}}
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}}).status_code == 202
    done = _polling_until(stack, api_key, cid, lambda b: b["state"] == "succeeded")
    assert done["outcome"] == {"made": 7}
    assert "check.requested" in _kinds(done)
    job_id = _job(stack, cid)["job_id"]
    assert _inbox(stack, job_id) and all(m.startswith("reconcile:") for m in _inbox(stack, job_id))
    with stack.db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.vendor_job_id == job_id)).one()
        assert task.polls >= 1


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_deadline_still_fires_while_the_polled_vendor_says_running(confirm_stack: Stack) -> None:
    stack = confirm_stack
    api_key, _, _ = stack.new_client()
    cid = f"late-{uuid.uuid4().hex[:8]}"
    body = {
        "correlation_id": cid,
        "input": {"simulate": {"silent": True, "complete_delay_s": 600}},
        "execution_timeout_s": 3600,
    }
    task = stack.submit(api_key, body).json()
    running = _polling_until(stack, api_key, cid, lambda b: b["state"] == "accepted")  # a poll heard running
    assert _job(stack, cid)["status"] == "running"
    check_deadlines(stack.ctx, _at(task["execution_deadline"]) + timedelta(seconds=1))
    late = stack.wait_for_task(api_key, cid, until=lambda b: "deadline.exceeded" in _kinds(b))
    exceeded = next(e for e in late["timeline"] if e["kind"] == "deadline.exceeded")
    assert exceeded["detail"]["deadline"] == "execution" and exceeded["detail"]["vendor_status"] == "running"
    assert late["state"] == running["state"] == "accepted"
