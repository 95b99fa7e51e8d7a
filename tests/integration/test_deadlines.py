"""Honest deadlines and heartbeats (issue 12) on real services, both brokers: the vendor is asked
before any escalation, a final answer there is applied instead, and a submit retry past the
execution deadline escalates without failing the task. Time is moved by passing ``now`` to the
beat job, never by sleeping for minutes; the submit retries run on the stack's short backoff."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from tests.integration.stack import Stack
from workers.deadlines import check_deadlines


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _kinds(body: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in body["timeline"]]


def _callbacks(stack: Stack, path: str) -> list[dict[str, Any]]:
    return [r.json() for r in stack.callbacks.posts_to(path) if r.status < 300]


def _incidents(stack: Stack, cid: str) -> list[dict[str, Any]]:
    items = stack.admin("GET", "/incidents", params={"kind": "deadline_exceeded", "limit": 500}).json()["items"]
    return [i for i in items if i["correlation_id"] == cid]


def _wait_at_vendor(stack: Stack, cid: str, status: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        [job] = stack.vendor("GET", f"/jobs?reference={stack.reference(cid)}").json()["jobs"]
        if job["status"] == status:
            return
        assert time.monotonic() < deadline, f"the vendor's job stayed {job['status']}"
        time.sleep(0.05)


# --- A submit retry past the execution deadline ---


def test_escalate_mode_retry_past_the_deadline_escalates_once_and_keeps_retrying(
    pair_stack: Stack, vendor_down: None
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"retry-escalate-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 0}}, "execution_timeout_s": 1}
    assert pair_stack.submit(api_key, body).status_code == 202
    # Retries at ~0.2, 0.4, 0.8, 1.6 s: one of them would start past the deadline 1 s out.
    escalated = pair_stack.wait_for_task(api_key, cid, until=lambda b: "deadline.exceeded" in _kinds(b))
    pair_stack.vendor("POST", "/_sim/config", json={})  # the vendor is back before the budget is spent
    assert escalated["state"] == "requested" and escalated["retrying"]
    exceeded = next(e for e in escalated["timeline"] if e["kind"] == "deadline.exceeded")
    assert exceeded["detail"]["deadline"] == "execution" and exceeded["detail"]["vendor_status"] == "no_job"

    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "succeeded"  # not failed: the retry went ahead and the job ran
    assert _kinds(done).count("deadline.exceeded") == 1  # once, whatever the retries after it
    pair_stack.callbacks.wait_for(
        lambda _: [c["type"] for c in _callbacks(pair_stack, path)].count("task.completed") == 1, timeout=10
    )
    [callback] = [c for c in _callbacks(pair_stack, path) if c["type"] == "task.deadline_exceeded"]
    assert callback["deadline"] == "execution" and callback["vendor_status"] == "no_job"
    assert callback["state"] == "requested"
    [incident] = _incidents(pair_stack, cid)
    assert "no_job" in incident["detail"]


def test_escalate_mode_fails_the_task_only_when_its_retry_budget_is_spent(pair_stack: Stack, vendor_down: None) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"retry-budget-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": "x", "execution_timeout_s": 1}
    assert pair_stack.submit(api_key, body).status_code == 202
    done = pair_stack.wait_for_task(api_key, cid, timeout=30)
    assert done["state"] == "failed" and done["attempts"] == pair_stack.settings.providers["sim"].submit_max_attempts
    kinds = _kinds(done)
    assert kinds.count("deadline.exceeded") == 1
    assert kinds.index("deadline.exceeded") < kinds.index("submit.dead_lettered")
    assert kinds.count("submit.attempt_failed") == done["attempts"] - 1  # every attempt the budget allows


def test_cancel_mode_retry_past_the_deadline_cancels_the_task(pair_stack: Stack, vendor_down: None) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"retry-cancel-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": "x", "execution_timeout_s": 1, "on_deadline": "cancel"}
    assert pair_stack.submit(api_key, body).status_code == 202
    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "canceled" and not done["retrying"]
    kinds = _kinds(done)
    assert kinds.index("deadline.exceeded") < kinds.index("state.canceled") < kinds.index("submit.canceled")
    assert "submit.dead_lettered" not in kinds
    pair_stack.callbacks.wait_for(
        lambda _: {c["type"] for c in _callbacks(pair_stack, path)} >= {"task.deadline_exceeded", "task.completed"},
        timeout=10,
    )
    completed = next(c for c in _callbacks(pair_stack, path) if c["type"] == "task.completed")
    assert completed["state"] == "canceled"


# --- Asking the vendor before escalating ---


def test_a_dropped_completion_before_the_deadline_is_applied_from_status_not_escalated(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"dropped-{uuid.uuid4().hex[:8]}"
    simulate = {"drop": ["job.completed"], "complete_delay_s": 0, "outcome_payload": {"made": 1}}
    body = {"correlation_id": cid, "input": {"simulate": simulate}, "execution_timeout_s": 600, "on_deadline": "cancel"}
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    _wait_at_vendor(pair_stack, cid, "succeeded")  # its completion webhook was dropped
    check_deadlines(pair_stack.ctx, _at(task["execution_deadline"]) + timedelta(seconds=1))

    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "succeeded" and done["outcome"] == {"made": 1}  # from the vendor's status
    kinds = _kinds(done)
    assert "deadline.exceeded" not in kinds and "state.cancel_requested" not in kinds  # no false alarm, no cancel
    probe = next(e for e in done["timeline"] if e["kind"] == "probe.done")
    assert probe["detail"] == {**probe["detail"], "result": "applied", "vendor_status": "succeeded"}
    pair_stack.callbacks.wait_for(
        lambda _: "task.completed" in [c["type"] for c in _callbacks(pair_stack, path)], timeout=10
    )
    assert "task.deadline_exceeded" not in [c["type"] for c in _callbacks(pair_stack, path)]
    assert _incidents(pair_stack, cid) == []


def test_a_deadline_escalation_says_the_vendor_could_not_be_reached(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"unreachable-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 600}}, "execution_timeout_s": 600}
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    pair_stack.vendor("POST", "/_sim/config", json={"down": True, "status_down": True})
    try:
        check_deadlines(pair_stack.ctx, _at(task["execution_deadline"]) + timedelta(seconds=1))
        pair_stack.callbacks.wait_for(
            lambda _: "task.deadline_exceeded" in [c["type"] for c in _callbacks(pair_stack, path)], timeout=10
        )
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})
    [callback] = [c for c in _callbacks(pair_stack, path) if c["type"] == "task.deadline_exceeded"]
    assert callback["vendor_status"] == "unreachable" and callback["state"] == "accepted"
    [incident] = _incidents(pair_stack, cid)
    assert "unreachable" in incident["detail"] and "503" in incident["detail"]
    assert pair_stack.get(api_key, cid)["state"] == "accepted"  # escalate: not interrupted


# --- Heartbeats ---


def test_the_heartbeat_timeout_fires_a_reconcile(pair_stack: Stack) -> None:
    """A silent vendor (no webhook at all) whose job finished: the heartbeat's status call finds it."""
    api_key, _, path = pair_stack.new_client()
    cid = f"heartbeat-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"silent": True, "complete_delay_s": 0}}}
    task = pair_stack.submit(api_key, {**body, "heartbeat_timeout_s": 60}).json()
    assert task["heartbeat_timeout_s"] == 60
    submitted = pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    last = _at(submitted["last_event_at"])  # the submit's answer started the heartbeat
    _wait_at_vendor(pair_stack, cid, "succeeded")  # finished there, and not a word sent about it

    check_deadlines(pair_stack.ctx, last + timedelta(seconds=59))
    assert "heartbeat.asking_vendor" not in _kinds(pair_stack.get(api_key, cid))
    check_deadlines(pair_stack.ctx, last + timedelta(seconds=61))
    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "succeeded"
    kinds = _kinds(done)
    assert kinds.index("heartbeat.asking_vendor") < kinds.index("state.succeeded")
    assert "deadline.exceeded" not in kinds
    pair_stack.callbacks.wait_for(
        lambda _: "task.completed" in [c["type"] for c in _callbacks(pair_stack, path)], timeout=10
    )


def test_a_silent_task_whose_vendor_does_not_answer_is_escalated(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"heartbeat-down-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"silent": True}}, "heartbeat_timeout_s": 60}
    assert pair_stack.submit(api_key, body).status_code == 202
    submitted = pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    pair_stack.vendor("POST", "/_sim/config", json={"down": True, "status_down": True})
    try:
        check_deadlines(pair_stack.ctx, _at(submitted["last_event_at"]) + timedelta(seconds=61))
        pair_stack.callbacks.wait_for(
            lambda _: "task.deadline_exceeded" in [c["type"] for c in _callbacks(pair_stack, path)], timeout=10
        )
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})
    [callback] = [c for c in _callbacks(pair_stack, path) if c["type"] == "task.deadline_exceeded"]
    assert callback["deadline"] == "heartbeat" and callback["vendor_status"] == "unreachable"
    assert pair_stack.get(api_key, cid)["state"] == "submitted"  # a heartbeat warns; it never cancels


def test_a_bad_heartbeat_timeout_is_a_field_error(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    for bad in (0, -5, "60", 1.5, True):
        response = pair_stack.submit(api_key, {"input": "x", "heartbeat_timeout_s": bad})
        assert response.status_code == 422
        assert [e["field"] for e in response.json()["errors"]] == ["heartbeat_timeout_s"]
