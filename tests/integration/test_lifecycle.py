"""Deadlines, cancellation, reconciliation and orphans on real services. Time is moved by passing
``now`` to the beat jobs' functions, never by sleeping for minutes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import cast

import pytest
from sqlalchemy import select

from models import ExternalTask, OrphanEvent, OutboxMessage
from models.base import utcnow
from runtime.provider import JobSnapshot
from service import claims, vendor_events
from service.lifecycle import escalate_due
from service.orphans import flag_stale_orphans
from tests.integration import due_work
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event
from tests.support.concurrency import twice_at_once
from webhooks.events import EventType, VendorEvent
from workers.reconcile import reconcile

SILENT = {"drop": ["job.accepted", "job.completed"]}
QUIET = timedelta(seconds=1000)  # past the default reconcile_after_s of 900


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _escalate(stack: Stack, now: datetime) -> int:
    with stack.db.transaction() as session:
        escalated, _ = escalate_due(session, now, 500)  # its relays are published at commit
    return escalated


def _job_id(stack: Stack, cid: str) -> str:
    return stack.vendor("GET", f"/jobs?reference={stack.reference(cid)}").json()["jobs"][0]["job_id"]


def _types(stack: Stack, path: str) -> list[tuple[str, str | None]]:
    return [(r.json()["type"], r.json().get("deadline")) for r in stack.callbacks.posts_to(path) if r.status < 300]


def test_each_deadline_escalates_exactly_once_and_a_late_completion_still_completes(
    pair_stack: Stack, vendor_secret: str
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"late-{uuid.uuid4().hex[:8]}"
    body = {
        "correlation_id": cid,
        # still queued at the vendor when asked (each escalation asks first), and telling nobody
        "input": {"simulate": {**SILENT, "accept_delay_s": 600}},
        "acceptance_timeout_s": 60,
        "execution_timeout_s": 120,
    }
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    acceptance, execution = _at(task["acceptance_deadline"]), _at(task["execution_deadline"])

    def escalations() -> list[str]:
        return [
            e["detail"]["deadline"]
            for e in pair_stack.get(api_key, cid)["timeline"]
            if e["kind"] == "deadline.exceeded"
        ]

    # The database is shared with other tests: look at this task's timeline, not at global counts.
    _escalate(pair_stack, acceptance - timedelta(seconds=1))
    assert escalations() == []
    _escalate(pair_stack, acceptance + timedelta(seconds=5))
    _escalate(pair_stack, acceptance + timedelta(seconds=6))
    pair_stack.wait_for_task(api_key, cid, until=lambda _: escalations() == ["acceptance"])  # after the vendor's answer
    time.sleep(0.5)  # a second escalation (there must be none) would be on the timeline by now
    assert escalations() == ["acceptance"]  # once per deadline
    pair_stack.callbacks.wait_for(
        lambda _: ("task.deadline_exceeded", "acceptance") in _types(pair_stack, path), timeout=10
    )
    assert pair_stack.get(api_key, cid)["state"] == "submitted"  # non-interrupting

    _escalate(pair_stack, execution + timedelta(seconds=30))
    _escalate(pair_stack, execution + timedelta(seconds=31))
    pair_stack.wait_for_task(api_key, cid, until=lambda _: escalations() == ["acceptance", "execution"])
    pair_stack.callbacks.wait_for(
        lambda _: ("task.deadline_exceeded", "execution") in _types(pair_stack, path), timeout=10
    )
    exceeded = [r.json() for r in pair_stack.callbacks.posts_to(path) if r.json()["type"] == "task.deadline_exceeded"]
    assert sorted(e["deadline"] for e in exceeded) == ["acceptance", "execution"]
    execution_callback = next(e for e in exceeded if e["deadline"] == "execution")
    assert execution_callback["late_by_s"] == 30.0
    assert {e["vendor_status"] for e in exceeded} == {"queued"}  # what the vendor said when asked
    incidents = pair_stack.admin("GET", "/incidents", params={"kind": "deadline_exceeded", "limit": 500}).json()[
        "items"
    ]
    assert len([i for i in incidents if i["correlation_id"] == cid]) == 2

    event = {
        "type": "job.completed",
        "job_id": _job_id(pair_stack, cid),
        "status": "succeeded",
        "outcome": {"late": True},
    }
    assert post_event(pair_stack.web.url, vendor_secret, event).json()["status"] == "applied"
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    pair_stack.callbacks.wait_for(lambda _: ("task.completed", None) in _types(pair_stack, path), timeout=10)


def test_on_deadline_cancel_cancels_at_the_vendor(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"cancel-on-deadline-{uuid.uuid4().hex[:8]}"
    body = {
        "correlation_id": cid,
        "input": {"simulate": {"complete_delay_s": 60}},
        "execution_timeout_s": 30,
        "on_deadline": "cancel",
    }
    task = pair_stack.submit(api_key, body).json()
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    _escalate(pair_stack, _at(task["execution_deadline"]) + timedelta(seconds=1))
    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "canceled"
    kinds = [e["kind"] for e in done["timeline"]]
    assert kinds.index("deadline.exceeded") < kinds.index("state.cancel_requested") < kinds.index("state.canceled")
    assert pair_stack.vendor("GET", f"/jobs/{_job_id(pair_stack, cid)}").json()["status"] == "canceled"
    pair_stack.callbacks.wait_for(
        lambda reqs: any(
            r.path == path and r.json()["type"] == "task.completed" and r.json()["state"] == "canceled" for r in reqs
        ),
        timeout=10,
    )


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
        api_key, cid, until=lambda b: b["state"] == "canceled" and "cancel.sent" in [e["kind"] for e in b["timeline"]]
    )
    assert [e["kind"] for e in done["timeline"]].count("cancel.sent") == 1
    pair_stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json().get("state") == "canceled" for r in reqs), timeout=10
    )
    final = requests.post(url, json={}, headers={"Authorization": f"Bearer {api_key}"}, timeout=5)
    assert final.status_code == 409 and final.json()["state"] == "canceled"
    # The first request's key is honoured even now the task is final: same answer, not a 409.
    repeat = requests.post(url, json={"reason": "customer changed their mind"}, headers=headers, timeout=5)
    assert repeat.status_code == 202 and repeat.json()["state"] == "canceled"
    assert requests.post(url, json={"reason": 5}, headers=headers, timeout=5).status_code == 422


def test_a_cancel_the_vendor_refuses_is_a_system_dead_letter(pair_stack: Stack) -> None:
    """The vendor answers 404 for a job it gave us: nothing the caller can fix."""
    import requests
    from sqlalchemy import update

    api_key, _, _ = pair_stack.new_client()
    cid, _ = pair_stack.unpublished_task(api_key, {"input": "x"})
    with pair_stack.db.transaction() as session:  # submitted long ago; the vendor has since lost the job
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.correlation_id == cid)
            .values(state="submitted", vendor_job_id=f"job_lost_{uuid.uuid4().hex[:8]}")
        )
    response = requests.post(
        f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel", headers={"Authorization": f"Bearer {api_key}"}, timeout=5
    )
    assert response.status_code == 202
    body = pair_stack.wait_for_task(
        api_key, cid, until=lambda b: "cancel.dead_lettered" in [e["kind"] for e in b["timeline"]]
    )
    letter = next(e for e in body["timeline"] if e["kind"] == "cancel.dead_lettered")
    assert letter["detail"]["fault"] == "system" and "404" in letter["detail"]["error"]


def test_cancel_before_the_vendor_knows_the_job_never_submits(pair_stack: Stack, vendor_down: None) -> None:
    import requests

    api_key, _, path = pair_stack.new_client()
    cid = f"cancel-early-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    response = requests.post(
        f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel", headers={"Authorization": f"Bearer {api_key}"}, timeout=5
    )
    # canceled at once; or, when the cancel came while a retry's delivery was under way (the vendor
    # may be creating a job we have no id for), cancel_requested until that attempt is settled
    assert response.status_code == 202 and response.json()["state"] in ("canceled", "cancel_requested")
    pair_stack.vendor("POST", "/_sim/config", json={})
    body = pair_stack.wait_for_task(
        api_key,
        cid,
        until=lambda b: bool({"submit.skipped", "submit.canceled"} & {e["kind"] for e in b["timeline"]}),
    )
    assert body["state"] == "canceled"
    assert pair_stack.vendor("GET", f"/jobs?reference={pair_stack.reference(cid)}").json()["jobs"] == []
    pair_stack.callbacks.wait_for(
        lambda reqs: any(
            r.path == path and r.json()["type"] == "task.completed" and r.json()["state"] == "canceled" for r in reqs
        ),
        timeout=10,
    )


def test_a_cancel_after_an_unanswered_submit_whose_find_failed_cancels_the_job_at_the_vendor(
    pair_stack: Stack,
) -> None:
    """The submit goes out and no answer comes (the vendor creates the job, then answers past the
    read timeout), and ``find`` cannot be asked either: nobody knows whether the vendor holds a job.
    A cancel then must not end the task as if the vendor had none: the task stays
    ``cancel_requested`` until ``find`` answers, and the job it finds is canceled at the vendor."""
    import requests

    api_key, _, _ = pair_stack.new_client()
    cid = f"cancel-unanswered-{uuid.uuid4().hex[:8]}"
    slow = {"slow_s": 3, "complete_delay_s": 600}  # past the read timeout (2 s); never completes alone
    pair_stack.vendor("POST", "/_sim/config", json={"status_down": True})  # find cannot be asked
    try:
        pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": slow}})
        pair_stack.wait_for_task(api_key, cid, until=lambda b: "submit.attempt_failed" in _kinds(b), timeout=30)
        response = requests.post(
            f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel", headers={"Authorization": f"Bearer {api_key}"}, timeout=5
        )
        assert response.status_code == 202
        # a delivery after the cancel ended while find was still down: an attempt, or a skip
        pair_stack.wait_for_task(api_key, cid, until=_submit_ended_after_the_cancel, timeout=30)
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})
    body = pair_stack.wait_for_task(
        api_key,
        cid,
        until=lambda b: b["state"] == "canceled" and bool({"cancel.sent", "submit.skipped"} & set(_kinds(b))),
        timeout=30,
    )
    jobs = pair_stack.vendor("GET", f"/jobs?reference={pair_stack.reference(cid)}").json()["jobs"]
    assert [job["status"] for job in jobs] == ["canceled"], (jobs, _kinds(body))
    assert "submit.dead_lettered" not in _kinds(body)


def _kinds(body: dict) -> list[str]:
    return [e["kind"] for e in body["timeline"]]


def _submit_ended_after_the_cancel(body: dict) -> bool:
    kinds = _kinds(body)
    canceled = [n for n, k in enumerate(kinds) if k in ("state.canceled", "state.cancel_requested")]
    return bool(canceled) and bool({"submit.attempt_failed", "submit.skipped"} & set(kinds[canceled[0] + 1 :]))


def test_dropped_webhook_is_recovered_by_reconciliation_and_a_later_duplicate_changes_nothing(
    pair_stack: Stack, vendor_secret: str
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"reconcile-{uuid.uuid4().hex[:8]}"
    simulate = {"drop": ["job.completed"], "complete_delay_s": 60}  # the test completes it, below
    pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: "relay.delivered" in [e["kind"] for e in b["timeline"]])
    job_id = _job_id(pair_stack, cid)
    pair_stack.vendor("POST", f"/_sim/jobs/{job_id}/complete", json={"status": "succeeded", "outcome": {"n": 7}})

    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert report.checked >= 1 and report.applied >= 1
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"n": 7}
    calls: list[str] = []
    with _spy_on_status(pair_stack, calls):
        reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert job_id not in calls  # final now: nothing left to ask about

    late = post_event(
        pair_stack.web.url,
        vendor_secret,
        {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"n": 7}},
    )
    assert late.json()["status"] == "ignored"
    pair_stack.callbacks.wait_for(lambda reqs: len([r for r in reqs if r.path == path]) == 2, timeout=10)
    assert [r.json()["type"] for r in pair_stack.callbacks.posts_to(path)] == ["task.accepted", "task.completed"]


def test_reconcile_redrives_a_task_never_submitted_and_flags_a_job_the_vendor_does_not_know(pair_stack: Stack) -> None:
    from models import Incident

    api_key, _, _ = pair_stack.new_client()
    stuck, _ = pair_stack.unpublished_task(api_key, {"input": "never reached the broker"})
    ghost, ghost_outbox = pair_stack.unpublished_task(api_key, {"input": "x"})
    with pair_stack.db.transaction() as session:  # the vendor answered, then forgot the job
        submit_row = session.get(OutboxMessage, ghost_outbox)
        assert submit_row is not None
        vendor_events.record_submission(session, submit_row, f"job_gone_{uuid.uuid4().hex}", utcnow())

    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert report.redriven >= 1 and report.unknown >= 1
    assert pair_stack.wait_for_task(api_key, stuck)["state"] == "succeeded"
    with pair_stack.db.transaction() as session:
        incident = session.scalars(select(Incident).where(Incident.correlation_id == ghost)).one()
        assert incident.kind == "unknown_job" and incident.resolved_at is None


def _accepted_tasks(stack: Stack, api_key: str, prefix: str, n: int) -> list[str]:
    """``n`` tasks the vendor accepted and will not finish soon (nor tell us about), with their
    ``task.accepted`` relayed: no worker holds their row lock any more, which a reconcile claim
    (SKIP LOCKED) would otherwise pass over."""
    cids = [f"{prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    for cid in cids:
        stack.submit(
            api_key, {"correlation_id": cid, "input": {"simulate": {"drop": ["job.completed"], "complete_delay_s": 60}}}
        )
    for cid in cids:
        stack.wait_for_task(api_key, cid, until=lambda b: "relay.delivered" in [e["kind"] for e in b["timeline"]])
    return cids


@contextmanager
def _spy_on_status(stack: Stack, calls: list[str]) -> Iterator[None]:
    """Record which jobs reconcile asks about, in order (the calls still go to the simulator)."""
    provider = stack.ctx.providers["sim"]
    real = provider.status

    def status(job_id: str) -> JobSnapshot:
        calls.append(job_id)
        return real(job_id)

    provider.status = status  # type: ignore[method-assign]  # a spy on this instance, removed below
    try:
        yield
    finally:
        del provider.status


def test_reconcile_respects_the_rate_limit_oldest_first(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cids = _accepted_tasks(pair_stack, api_key, "paced", 4)
    ancient = utcnow() - timedelta(days=30)  # older than anything else in the shared database
    order = [cids[2], cids[0], cids[3], cids[1]]
    with pair_stack.db.transaction() as session:
        for minutes, cid in enumerate(order):
            task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == cid)).one()
            task.checked_at = ancient + timedelta(minutes=minutes)
            assert task.vendor_job_id is not None  # accepted: the vendor gave it a job
            order[minutes] = task.vendor_job_id
    waits: list[float] = []
    calls: list[str] = []
    with _spy_on_status(pair_stack, calls):
        report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=waits.append)
    assert calls[:4] == order  # oldest first
    assert report.checked == len(calls) >= 4
    # Pacing is the provider's shared limiter's (workers.providers.limited): every status call takes
    # a slot of it; tests/integration/test_limits.py counts what it grants across processes.
    assert all(w > 0 for w in waits)


def test_two_reconcile_runs_at_once_ask_about_each_task_once(pair_stack: Stack) -> None:
    """The second run finds the provider's lease taken and leaves it alone: together the runs stay
    within the rate limit, and no job is asked about twice."""
    api_key, _, _ = pair_stack.new_client()
    cids = _accepted_tasks(pair_stack, api_key, "twice", 3)
    calls: list[str] = []
    with _spy_on_status(pair_stack, calls):
        # each call waits 50 ms (the pacing), so the first run is still going when the second starts
        reports = twice_at_once(lambda: reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: time.sleep(0.05)))
    with pair_stack.db.transaction() as session:
        query = select(ExternalTask.vendor_job_id).where(ExternalTask.correlation_id.in_(cids))
        jobs = cast("Sequence[str]", session.scalars(query).all())  # accepted tasks: every one has a job
    assert all(calls.count(job) == 1 for job in jobs)
    assert len(calls) == len(set(calls))
    assert sorted(r.skipped for r in reports) == [[], ["sim"]]
    assert sum(r.checked for r in reports) == len(calls)


def test_a_reconcile_run_stops_claiming_work_at_its_time_budget(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    _accepted_tasks(pair_stack, api_key, "budget", 2)
    budget = pair_stack.settings.reconcile_max_run_s
    clock = iter([0.0, budget + 1.0])  # the budget is over before the first batch is claimed
    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None, clock=lambda: next(clock))
    assert (report.checked, report.unfinished) == (0, ["sim"])
    assert reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None).checked >= 2  # the next run does it


@pytest.mark.parametrize("locked_by_claim", [False, True], ids=["lock-at-record", "lock-in-claim"])
def test_a_webhook_racing_the_submit_response_is_applied_not_left_an_orphan(
    pair_stack: Stack, locked_by_claim: bool
) -> None:
    """The submission has set the job id but not committed when the webhook for that job arrives:
    the webhook waits for it (job lock on PostgreSQL, BEGIN IMMEDIATE on SQLite) and then applies.
    The worker's record takes the job lock in the statement that claims the row and its task
    (``locked_by_claim``); a caller without the lock has ``record_submission`` take it."""
    api_key, _, _ = pair_stack.new_client()
    cid, outbox_id = pair_stack.unpublished_task(api_key, {"input": "x"})
    job_id = f"job_{uuid.uuid4().hex}"
    results: list[vendor_events.EventResult] = []

    def webhook() -> None:
        with pair_stack.db.transaction() as session:
            results.append(
                vendor_events.receive_event(
                    session, "sim", f"msg_{uuid.uuid4().hex}", VendorEvent(EventType.ACCEPTED, job_id), utcnow()
                )
            )

    with pair_stack.db.transaction() as session:
        if locked_by_claim:
            found = claims.claim_outbox_and_task(session, outbox_id, job=("sim", job_id))
            assert found is not None
            claimed, task, _ = found
            vendor_events.record_submission(session, claimed, job_id, utcnow(), task=task, job_locked=True)
        else:
            row = claims.claim_outbox(session, outbox_id)
            assert row is not None
            vendor_events.record_submission(session, row, job_id, utcnow())
        racer = threading.Thread(target=webhook)
        racer.start()
        racer.join(timeout=1.0)
        assert racer.is_alive(), "the webhook must wait for the submission's commit"
    racer.join(timeout=10)
    assert [r.status for r in results] == ["applied"]
    with pair_stack.db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == cid)).one()
        assert task.state == "accepted"
        assert session.scalars(select(OrphanEvent).where(OrphanEvent.vendor_job_id == job_id)).all() == []


def test_orphans_attach_and_discard(pair_stack: Stack, vendor_secret: str, vendor_down: None) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"adopt-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    job_id = f"job_{uuid.uuid4().hex}"
    event = {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"adopted": True}}
    assert post_event(pair_stack.web.url, vendor_secret, event).json()["status"] == "orphan"
    stray_job = f"job_{uuid.uuid4().hex}"
    stray = post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": stray_job})
    assert stray.json()["status"] == "orphan"
    orphans = {
        o["vendor_job_id"]: o for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]
    }

    with pair_stack.db.transaction() as session:
        assert flag_stale_orphans(session, utcnow() + timedelta(hours=2), 3600, 500) >= 2
    flagged = pair_stack.admin("GET", "/incidents", params={"kind": "orphan_unbound", "limit": 500}).json()["items"]
    assert {f"orphan:{orphans[job_id]['id']}", f"orphan:{orphans[stray_job]['id']}"} <= {i["subject"] for i in flagged}

    attached = pair_stack.admin("POST", f"/orphans/{orphans[job_id]['id']}/attach", json={"correlation_id": cid})
    assert attached.status_code == 202 and attached.json()["state"] == "resolved"
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"adopted": True}
    pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)

    stray_id = orphans[stray_job]["id"]
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/discard").json()["state"] == "discarded"
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/discard").status_code == 409
    assert pair_stack.admin("POST", f"/orphans/{stray_id}/attach", json={"correlation_id": cid}).status_code == 409
    open_ids = [o["id"] for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]]
    assert stray_id not in open_ids and orphans[job_id]["id"] not in open_ids


def test_a_lost_outbox_message_is_re_driven_by_the_sweep(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid, outbox_id = pair_stack.unpublished_task(api_key, {"input": "lost"})
    with pair_stack.db.transaction() as session:  # published an hour ago, then the broker lost it
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        row.dispatched_at = utcnow() - timedelta(hours=1)
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
    orphan = next(
        o
        for o in pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]
        if o["vendor_job_id"] == job_id
    )
    assert pair_stack.admin("POST", f"/orphans/{orphan['id']}/attach", json={"correlation_id": cid}).status_code == 202
    with pair_stack.db.transaction() as session:
        incident = session.scalars(select(Incident).where(Incident.subject == f"orphan:{orphan['id']}")).one()
        assert incident.resolved_at is not None and f"bound to {cid}" in incident.detail


def test_beat_jobs_run_as_celery_tasks_on_the_worker(pair_stack: Stack, vendor_secret: str) -> None:
    """What beat sends, by name, to the real worker; reconcile through the admin API's trigger."""
    api_key, _, _ = pair_stack.new_client()
    overdue, lost, quiet = (
        due_work.overdue_task(pair_stack, api_key),
        due_work.lost_submit(pair_stack, api_key),
        due_work.quiet_finished_task(pair_stack, api_key),
    )
    old, orphan = due_work.old_processed_message(pair_stack), due_work.stale_orphan(pair_stack, vendor_secret)
    for name in (
        "liaison.sweep_outbox",
        "liaison.check_deadlines",
        "liaison.retention",
        "liaison.flag_stale_orphans",
    ):
        pair_stack.celery.send_task(name)
    assert pair_stack.admin("POST", "/reconcile").status_code == 202

    assert pair_stack.wait_for_task(api_key, lost)["state"] == "succeeded"
    pair_stack.wait_for_task(
        api_key, overdue, until=lambda b: "deadline.exceeded" in [e["kind"] for e in b["timeline"]]
    )
    assert pair_stack.wait_for_task(api_key, quiet)["outcome"] == {"quiet": True}
    deadline = time.monotonic() + 20
    while due_work.processed_message_exists(pair_stack, *old) or not due_work.orphan_flagged(pair_stack, orphan):
        assert time.monotonic() < deadline, "prune or flag_stale_orphans did not run on the worker"
        time.sleep(0.1)
