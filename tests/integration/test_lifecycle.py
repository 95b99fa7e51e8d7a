"""Deadlines, cancellation, reconciliation and orphans on real services. Time is moved by passing
``now`` to the beat jobs' functions, never by sleeping for minutes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from models import ExternalTask, OutboxMessage
from models.base import utcnow
from models.lifecycle import escalate_due, flag_stale_orphans
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event
from workers.reconcile import reconcile

SILENT = {"drop": ["job.accepted", "job.completed"]}
QUIET = timedelta(seconds=1000)  # past the default reconcile_after_s of 900


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _escalate(stack: Stack, now: datetime) -> int:
    with stack.db.transaction() as session:
        escalated, rows = escalate_due(session, now, 500)
    stack.ctx.publisher.publish(rows)
    return escalated


def _job_id(stack: Stack, cid: str) -> str:
    return stack.vendor("GET", f"/jobs?reference={cid}").json()["jobs"][0]["job_id"]


def _types(stack: Stack, path: str) -> list[tuple[str, str | None]]:
    return [(r.json()["type"], r.json().get("deadline")) for r in stack.callbacks.posts_to(path) if r.status < 300]


@pytest.fixture
def vendor_down(pair_stack: Stack) -> Iterator[None]:
    pair_stack.vendor("POST", "/_sim/config", json={"down": True})
    try:
        yield
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})


def test_each_deadline_escalates_exactly_once_and_a_late_completion_still_completes(
    pair_stack: Stack, vendor_secret: str
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"late-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": SILENT}, "acceptance_timeout_s": 60, "execution_timeout_s": 120}
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    acceptance, execution = _at(task["acceptance_deadline"]), _at(task["execution_deadline"])

    def escalations() -> list[str]:
        return [e["detail"]["deadline"] for e in pair_stack.get(api_key, cid)["timeline"] if e["kind"] == "deadline.exceeded"]

    # The database is shared with other tests: look at this task's timeline, not at global counts.
    _escalate(pair_stack, acceptance - timedelta(seconds=1))
    assert escalations() == []
    _escalate(pair_stack, acceptance + timedelta(seconds=5))
    _escalate(pair_stack, acceptance + timedelta(seconds=6))
    assert escalations() == ["acceptance"]  # once per deadline
    pair_stack.callbacks.wait_for(lambda _: ("task.deadline_exceeded", "acceptance") in _types(pair_stack, path), timeout=10)
    assert pair_stack.get(api_key, cid)["state"] == "submitted"  # non-interrupting

    _escalate(pair_stack, execution + timedelta(seconds=30))
    _escalate(pair_stack, execution + timedelta(seconds=31))
    assert escalations() == ["acceptance", "execution"]
    pair_stack.callbacks.wait_for(lambda _: ("task.deadline_exceeded", "execution") in _types(pair_stack, path), timeout=10)
    exceeded = [r.json() for r in pair_stack.callbacks.posts_to(path) if r.json()["type"] == "task.deadline_exceeded"]
    assert sorted(e["deadline"] for e in exceeded) == ["acceptance", "execution"]
    assert next(e for e in exceeded if e["deadline"] == "execution")["late_by_s"] == 30.0
    incidents = pair_stack.admin("GET", "/incidents", params={"kind": "deadline_exceeded", "limit": 500}).json()["items"]
    assert len([i for i in incidents if i["correlation_id"] == cid]) == 2

    event = {"type": "job.completed", "job_id": _job_id(pair_stack, cid), "status": "succeeded", "outcome": {"late": True}}
    assert post_event(pair_stack.web.url, vendor_secret, event).json()["status"] == "applied"
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    pair_stack.callbacks.wait_for(lambda _: ("task.completed", None) in _types(pair_stack, path), timeout=10)


def test_on_deadline_cancel_cancels_at_the_vendor(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"cancel-on-deadline-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 60}},
            "execution_timeout_s": 30, "on_deadline": "cancel"}
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    _escalate(pair_stack, _at(task["execution_deadline"]) + timedelta(seconds=1))
    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "canceled"
    kinds = [e["kind"] for e in done["timeline"]]
    assert kinds.index("deadline.exceeded") < kinds.index("state.cancel_requested") < kinds.index("state.canceled")
    assert pair_stack.vendor("GET", f"/jobs/{_job_id(pair_stack, cid)}").json()["status"] == "canceled"
    pair_stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json()["type"] == "task.completed" and r.json()["state"] == "canceled"
                         for r in reqs), timeout=10)


def test_cancel_flow_with_idempotency_key(pair_stack: Stack) -> None:
    import requests

    api_key, _, path = pair_stack.new_client()
    cid = f"cancel-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 60}}})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    url = f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel"
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"cancel-{cid}"}
    first = requests.post(url, json={"reason": "customer changed their mind"}, headers=headers, timeout=5)
    assert first.status_code == 202 and first.json()["state"] == "cancel_requested"
    again = requests.post(url, json={"reason": "customer changed their mind"}, headers=headers, timeout=5)
    assert again.status_code == 202
    # The vendor's webhook may confirm before or after the cancel task records its call: wait for both.
    done = pair_stack.wait_for_task(
        api_key, cid,
        until=lambda b: b["state"] == "canceled" and "cancel.sent" in [e["kind"] for e in b["timeline"]])
    assert [e["kind"] for e in done["timeline"]].count("cancel.sent") == 1
    pair_stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json().get("state") == "canceled" for r in reqs), timeout=10)
    final = requests.post(url, json={}, headers={"Authorization": f"Bearer {api_key}"}, timeout=5)
    assert final.status_code == 409 and final.json()["state"] == "canceled"
    assert requests.post(url, json={"reason": 5}, headers=headers, timeout=5).status_code == 422


def test_cancel_before_the_vendor_knows_the_job_never_submits(pair_stack: Stack, vendor_down: None) -> None:
    import requests

    api_key, _, path = pair_stack.new_client()
    cid = f"cancel-early-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    response = requests.post(f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel",
                             headers={"Authorization": f"Bearer {api_key}"}, timeout=5)
    assert response.status_code == 202 and response.json()["state"] == "canceled"
    pair_stack.vendor("POST", "/_sim/config", json={})
    body = pair_stack.wait_for_task(api_key, cid, until=lambda b: "submit.skipped" in [e["kind"] for e in b["timeline"]])
    assert body["state"] == "canceled"
    assert pair_stack.vendor("GET", f"/jobs?reference={cid}").json()["jobs"] == []
    pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)


def test_dropped_webhook_is_recovered_by_reconciliation_and_a_later_duplicate_changes_nothing(
    pair_stack: Stack, vendor_secret: str
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"reconcile-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"drop": ["job.completed"]}}})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    job_id = _job_id(pair_stack, cid)
    pair_stack.vendor("POST", f"/_sim/jobs/{job_id}/complete", json={"status": "succeeded", "outcome": {"n": 7}})

    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert report.checked >= 1 and report.applied >= 1
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"n": 7}
    again = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)  # nothing quiet any more
    assert cid not in str(again)

    late = post_event(pair_stack.web.url, vendor_secret,
                      {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"n": 7}})
    assert late.json()["status"] == "ignored"
    pair_stack.callbacks.wait_for(lambda reqs: len([r for r in reqs if r.path == path]) == 2, timeout=10)
    assert [r.json()["type"] for r in pair_stack.callbacks.posts_to(path)] == ["task.accepted", "task.completed"]


def test_reconcile_redrives_a_task_never_submitted_and_flags_a_job_the_vendor_does_not_know(pair_stack: Stack) -> None:
    from models import Incident, service

    api_key, _, _ = pair_stack.new_client()
    stuck, _ = pair_stack.unpublished_task(api_key, {"input": "never reached the broker"})
    ghost, ghost_outbox = pair_stack.unpublished_task(api_key, {"input": "x"})
    with pair_stack.db.transaction() as session:  # the vendor answered, then forgot the job
        service.record_submission(session, session.get(OutboxMessage, ghost_outbox), f"job_gone_{uuid.uuid4().hex}", utcnow())

    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert report.redriven >= 1 and report.unknown >= 1
    assert pair_stack.wait_for_task(api_key, stuck)["state"] == "succeeded"
    with pair_stack.db.transaction() as session:
        incident = session.scalars(select(Incident).where(Incident.correlation_id == ghost)).one()
        assert incident.kind == "unknown_job" and incident.resolved_at is None


def test_reconcile_respects_the_rate_limit_oldest_first(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cids = []
    for i in range(4):
        cid = f"paced-{i}-{uuid.uuid4().hex[:6]}"
        pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"drop": ["job.completed"], "complete_delay_s": 60}}})
        cids.append(cid)
    for cid in cids:
        pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    waits: list[float] = []
    clock = iter(range(10_000))  # a fake monotonic clock: 1 s between calls unless we wait
    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=waits.append, clock=lambda: 0.0 * next(clock))
    rate = pair_stack.settings.providers["sim"].rate_limit_per_s
    with pair_stack.db.transaction() as session:
        rows = [(t.correlation_id, t.state, t.checked_at) for t in
                session.scalars(select(ExternalTask).where(ExternalTask.correlation_id.in_(cids)))]
    assert report.checked >= 4, rows
    # With a frozen clock every call after the first must wait one token's time.
    assert waits[0] == 0 and all(abs(w - i / rate) < 1e-9 for i, w in enumerate(waits))


def test_orphans_attach_and_discard(pair_stack: Stack, vendor_secret: str, vendor_down: None) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"adopt-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    job_id = f"job_{uuid.uuid4().hex}"
    event = {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"adopted": True}}
    assert post_event(pair_stack.web.url, vendor_secret, event).json()["status"] == "orphan"
    stray = post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": f"job_{uuid.uuid4().hex}"})
    assert stray.json()["status"] == "orphan"
    orphans = {o["vendor_job_id"]: o for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]}

    with pair_stack.db.transaction() as session:
        assert flag_stale_orphans(session, utcnow() + timedelta(hours=2), 3600, 500) >= 2
    flagged = pair_stack.admin("GET", "/incidents", params={"kind": "orphan_unbound", "limit": 500}).json()["items"]
    assert len(flagged) >= 2

    attached = pair_stack.admin("POST", f"/orphans/{orphans[job_id]['id']}/attach", json={"correlation_id": cid})
    assert attached.status_code == 202 and attached.json()["state"] == "resolved"
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"adopted": True}
    pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)

    stray_id = next(o["id"] for o in orphans.values() if o["vendor_job_id"] != job_id and o["payload"]["type"] == "job.accepted"
                    and o["message_id"] == stray.json()["message_id"])
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/discard").json()["state"] == "discarded"
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/discard").status_code == 409
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/attach", json={"correlation_id": cid}).status_code == 409
    open_ids = [o["id"] for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]]
    assert stray_id not in open_ids and orphans[job_id]["id"] not in open_ids


def test_a_lost_outbox_message_is_re_driven_by_the_sweep(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid, outbox_id = pair_stack.unpublished_task(api_key, {"input": "lost"})
    with pair_stack.db.transaction() as session:  # published an hour ago, then the broker lost it
        session.get(OutboxMessage, outbox_id).dispatched_at = utcnow() - timedelta(hours=1)
    settings = pair_stack.settings
    assert pair_stack.ctx.publisher.sweep(utcnow(), settings.outbox_grace_s, settings.outbox_lease_s) >= 1
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"


def test_attaching_resolves_the_orphan_incident(pair_stack: Stack, vendor_secret: str) -> None:
    from models import Incident

    api_key, _, _ = pair_stack.new_client()
    cid, _ = pair_stack.unpublished_task(api_key, {"input": "late adoption"})
    job_id = f"job_{uuid.uuid4().hex}"
    post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id})
    with pair_stack.db.transaction() as session:
        flag_stale_orphans(session, utcnow() + timedelta(hours=2), 3600, 500)
    orphan = next(o for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]
                  if o["vendor_job_id"] == job_id)
    assert pair_stack.admin("POST", f"/orphans/{orphan['id']}/attach", json={"correlation_id": cid}).status_code == 202
    with pair_stack.db.transaction() as session:
        incident = session.scalars(select(Incident).where(Incident.subject == f"orphan:{orphan['id']}")).one()
        assert incident.resolved_at is not None and f"bound to {cid}" in incident.detail
