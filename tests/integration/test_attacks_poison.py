"""Issue 8, poison input: JSON nested deep enough to break any recursive decoder, sent to the API and
in webhooks (refused, 4xx), and planted straight in the database as rows written before the limits
existed could be (beat jobs, reconciliation and the submit go on for everyone else)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import requests
from sqlalchemy import event, select, text, update

from models import DeadLetter, ExternalTask, Incident, OutboxMessage
from models.base import utcnow
from service.orphans import flag_stale_orphans
from service.retention import prune_processed_messages
from tests.integration import due_work
from tests.integration.stack import Stack
from webhooks.signing import sign
from workers.deadlines import check_deadlines
from workers.reconcile import reconcile

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.lifecycle import DeadlineRule
    from service.vendor_events import EventResult

PROBLEM = "application/problem+json"
POISON_DEPTH = 960  # what the issue reproduced: deep enough that loading the row raised RecursionError
QUIET = timedelta(seconds=1000)  # past the default reconcile_after_s of 900


def _nested_object(levels: int) -> str:
    return '{"a":' * (levels - 1) + '{"b":1}' + "}" * (levels - 1)


def _auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}


def _plant_poison(stack: Stack, correlation_id: str, *columns: str, **values: object) -> None:
    """Write a 960-deep value into ``columns`` of a task directly, bypassing the API (and json.dumps,
    which could not even encode it), as rows stored before the limits existed could hold."""
    placeholder = ":poison" if stack.db.is_sqlite else "CAST(:poison AS jsonb)"
    assignments = ", ".join(f"{column} = {placeholder}" for column in columns)
    with stack.db.transaction() as session:
        session.execute(
            text(f"UPDATE external_tasks SET {assignments} WHERE correlation_id = :cid"),
            {"poison": _nested_object(POISON_DEPTH), "cid": correlation_id},
        )
        if values:
            session.execute(update(ExternalTask).where(ExternalTask.correlation_id == correlation_id).values(**values))


def _incidents(stack: Stack, correlation_id: str, kind: str) -> list[Incident]:
    with stack.db.transaction() as session:
        return list(
            session.scalars(select(Incident).where(Incident.correlation_id == correlation_id, Incident.kind == kind))
        )


def _column(stack: Stack, correlation_id: str, column: str) -> object:
    with stack.db.transaction() as session:
        return session.scalar(
            select(getattr(ExternalTask, column)).where(ExternalTask.correlation_id == correlation_id)
        )


def _wait(condition: Callable[[], object], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        time.sleep(0.1)


# --- (a) refused at the edge ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [960, 970, 100_000])
def test_deep_input_is_a_422_field_error_and_stores_nothing(pair_stack: Stack, depth: int) -> None:
    api_key, _, _ = pair_stack.new_client()
    body = b'{"input": {"a": ' + b"[" * depth + b"]" * depth + b"}}"  # arrays: 100 000 levels fit the body limit
    url = f"{pair_stack.web.url}/api/v1/tasks"
    response = requests.post(url, data=body, headers=_auth(api_key), timeout=30)
    assert response.status_code == 422, response.text
    assert response.headers["Content-Type"] == PROBLEM
    assert [e["field"] for e in response.json()["errors"]] == ["input"]
    assert "at most 32 levels" in response.json()["errors"][0]["message"]
    assert requests.get(url, headers=_auth(api_key), timeout=5).json()["tasks"] == []


def test_input_at_the_depth_limit_is_accepted_and_one_past_it_is_not(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    at_limit = json.loads(_nested_object(32))
    assert pair_stack.submit(api_key, {"input": at_limit}).status_code == 202
    past = pair_stack.submit(api_key, {"input": json.loads(_nested_object(33))})
    assert past.status_code == 422 and [e["field"] for e in past.json()["errors"]] == ["input"]


def test_input_past_the_size_limit_is_a_422(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    limit = pair_stack.settings.max_input_bytes
    response = pair_stack.submit(api_key, {"input": {"blob": "x" * limit}})
    assert response.status_code == 422 and [e["field"] for e in response.json()["errors"]] == ["input"]
    assert "bytes of JSON" in response.json()["errors"][0]["message"]


def _post_raw_event(stack: Stack, secret: str, body: bytes) -> requests.Response:
    headers = sign(secret, f"msg_{uuid.uuid4().hex}", int(time.time()), body).as_dict()
    headers["Content-Type"] = "application/json"
    return requests.post(f"{stack.web.url}/webhooks/sim", data=body, headers=headers, timeout=30)


@pytest.mark.parametrize("depth", [40, 960, 100_000])
def test_a_deep_outcome_webhook_is_refused_with_a_400(pair_stack: Stack, vendor_secret: str, depth: int) -> None:
    job_id = f"job_{uuid.uuid4().hex}"
    body = (
        b'{"type": "job.completed", "job_id": "'
        + job_id.encode()
        + b'", "status": "succeeded", "outcome": {"a": '
        + b"[" * depth
        + b"]" * depth
        + b"}}"
    )
    response = _post_raw_event(pair_stack, vendor_secret, body)
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"] == PROBLEM and "at most 32" in response.json()["detail"]
    orphans = pair_stack.admin("GET", "/orphans", params={"limit": 500}).json()["items"]
    assert job_id not in {o["vendor_job_id"] for o in orphans}  # nothing stored


def test_a_large_outcome_webhook_is_refused_with_a_413(pair_stack: Stack, vendor_secret: str) -> None:
    blob = "x" * pair_stack.settings.max_outcome_bytes
    body = json.dumps({"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"blob": blob}}).encode()
    response = _post_raw_event(pair_stack, vendor_secret, body)
    assert response.status_code == 413 and "bytes of JSON" in response.json()["detail"]


# --- (b) beat jobs and reconciliation go on for everyone else ---------------------------------


def test_deep_input_is_refused_and_a_deadline_still_escalates_for_another_tenant(pair_stack: Stack) -> None:
    poison_key, _, poison_path = pair_stack.new_client()
    normal_key, _, normal_path = pair_stack.new_client()
    poison = due_work.overdue_task(pair_stack, poison_key)
    with pair_stack.db.transaction() as session:  # no sweep may submit it: it sits at the vendor, long overdue
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == poison))
        session.execute(update(OutboxMessage).where(OutboxMessage.task_id == task_id).values(done_at=utcnow()))
    _plant_poison(
        pair_stack,
        poison,
        "input",
        "outcome",
        state="submitted",
        vendor_job_id=f"job_poison_{uuid.uuid4().hex}",
        acceptance_deadline=utcnow() - timedelta(minutes=2),
    )  # first in the batch
    normal = due_work.overdue_task(pair_stack, normal_key)

    pair_stack.celery.send_task("liaison.check_deadlines")  # the real beat task on the real worker

    pair_stack.wait_for_task(
        normal_key, normal, until=lambda b: "deadline.exceeded" in [e["kind"] for e in b["timeline"]]
    )
    pair_stack.callbacks.wait_for(
        lambda _: any(r.json()["type"] == "task.deadline_exceeded" for r in pair_stack.callbacks.posts_to(normal_path)),
        timeout=20,
    )
    assert len(_incidents(pair_stack, normal, "deadline_exceeded")) == 1
    # The poison row itself escalates too (nothing about it needed its input or outcome: neither
    # the probe that asks the vendor first, nor the escalation), and its relay is delivered: the
    # relay does not load them either.
    assert _column(pair_stack, poison, "acceptance_escalated_at") is not None
    pair_stack.callbacks.wait_for(
        lambda _: any(r.json()["type"] == "task.deadline_exceeded" for r in pair_stack.callbacks.posts_to(poison_path)),
        timeout=20,
    )
    assert len(_incidents(pair_stack, poison, "deadline_exceeded")) == 1


def _running_job(stack: Stack, correlation_id: str) -> str:
    """A job at the simulator that is running and tells nobody (its webhooks are dropped)."""
    simulate = {"drop": ["job.accepted", "job.completed"], "complete_delay_s": 60}
    job = stack.vendor(
        "POST",
        "/jobs",
        headers={"Idempotency-Key": correlation_id},
        json={
            "reference": correlation_id,
            "input": {"simulate": simulate},
            "callback_url": stack.settings.public_url + "/webhooks/sim",
        },
    ).json()
    _wait(lambda: stack.vendor("GET", f"/jobs/{job['job_id']}").json()["status"] == "running", what="job running")
    return job["job_id"]


def test_deep_outcome_is_refused_and_reconcile_still_applies_another_tenants_news(pair_stack: Stack) -> None:
    poison_key, _, _ = pair_stack.new_client()
    deep_key, _, _ = pair_stack.new_client()
    normal_key, _, _ = pair_stack.new_client()
    # A stored 960-deep input and outcome on a task the vendor says is running: reconciliation
    # claims it, asks, and applies "accepted" without loading either.
    poison, _ = pair_stack.unpublished_task(poison_key, {"input": "x"})
    _plant_poison(
        pair_stack,
        poison,
        "input",
        "outcome",
        state="submitted",
        vendor_job_id=_running_job(pair_stack, poison),
        checked_at=utcnow() - timedelta(days=40),
    )
    # A vendor whose status answer carries an outcome past the depth limit: refused and recorded.
    deep, _ = pair_stack.unpublished_task(deep_key, {"input": "x"})
    deep_job = _running_job(pair_stack, deep)
    pair_stack.vendor(
        "POST",
        f"/_sim/jobs/{deep_job}/complete",
        json={"status": "succeeded", "outcome": json.loads(_nested_object(40))},
    )
    with pair_stack.db.transaction() as session:
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.correlation_id == deep)
            .values(state="accepted", vendor_job_id=deep_job, checked_at=utcnow() - timedelta(days=40))
        )
    normal = due_work.quiet_finished_task(pair_stack, normal_key)

    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)  # it returns: the run did not crash

    assert pair_stack.wait_for_task(normal_key, normal)["outcome"] == {"quiet": True}
    assert _column(pair_stack, poison, "state") == "accepted"
    assert report.failed >= 1
    [refused] = _incidents(pair_stack, deep, "batch_row_failed")
    assert "nested 41 levels deep, an outcome may have at most 32" in refused.detail
    assert refused.subject == f"reconcile:sim:{deep}"
    assert _column(pair_stack, deep, "state") == "accepted"  # the refused outcome was not applied


def test_a_row_failing_inside_reconciliation_is_isolated(pair_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever makes applying one task's answer fail, that task's transaction rolls back alone and
    the run goes on. (The failure is injected into our own apply step; the rest is real.)"""
    import workers.reconcile as reconciliation

    bad_key, _, _ = pair_stack.new_client()
    good_key, _, _ = pair_stack.new_client()
    bad = due_work.quiet_finished_task(pair_stack, bad_key)
    good = due_work.quiet_finished_task(pair_stack, good_key)
    with pair_stack.db.transaction() as session:
        bad_job = session.scalar(select(ExternalTask.vendor_job_id).where(ExternalTask.correlation_id == bad))
    real = reconciliation.apply_snapshot

    def failing(
        session: Session, provider: str, job_id: str, status: str, outcome: Any, now: datetime
    ) -> EventResult | None:
        result = real(session, provider, job_id, status, outcome, now)  # its writes roll back with it
        if job_id == bad_job:
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")
        return result

    monkeypatch.setattr(reconciliation, "apply_snapshot", failing)
    report = reconcile(pair_stack.ctx, utcnow() + QUIET, sleep=lambda _: None)
    assert report.failed >= 1
    assert pair_stack.wait_for_task(good_key, good)["outcome"] == {"quiet": True}
    assert _column(pair_stack, bad, "state") == "accepted"
    [failed] = _incidents(pair_stack, bad, "batch_row_failed")
    assert "RecursionError" in failed.detail


def test_a_row_failing_inside_a_deadline_batch_is_isolated(pair_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever makes one task's escalation fail, the batch goes on: that task gets an incident and
    is not tried again ahead of everyone else's deadlines. (The failure is injected into our own
    per-task step; the database, the worker and the callbacks are real.)"""
    import service.lifecycle as lifecycle

    bad_key, _, _ = pair_stack.new_client()
    good_key, _, _ = pair_stack.new_client()
    bad = due_work.overdue_task(pair_stack, bad_key)
    good = due_work.overdue_task(pair_stack, good_key)
    real = lifecycle._claim_deadline

    def failing(session: Session, task: ExternalTask, rule: DeadlineRule, now: datetime) -> list[OutboxMessage]:
        if task.correlation_id == bad:
            real(session, task, rule, now)  # its writes happen, then are rolled back with the savepoint
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON object")
        return real(session, task, rule, now)

    monkeypatch.setattr(lifecycle, "_claim_deadline", failing)
    now = utcnow()
    check_deadlines(pair_stack.ctx, now)
    check_deadlines(pair_stack.ctx, now + timedelta(seconds=1))  # the failed row is not retried

    assert len(_incidents(pair_stack, good, "deadline_exceeded")) == 1
    assert _incidents(pair_stack, bad, "deadline_exceeded") == []  # rolled back
    [failed] = _incidents(pair_stack, bad, "batch_row_failed")
    assert failed.subject == f"check_deadlines:{bad}" and "RecursionError" in failed.detail
    assert _column(pair_stack, bad, "acceptance_escalated_at") is not None
    events = [e["kind"] for e in pair_stack.get(bad_key, bad)["timeline"]]
    assert "deadline.exceeded" not in events


# --- (c) the submit of a poison row is dead-lettered, not looped --------------------------------


def test_the_submit_of_a_stored_poison_input_is_dead_lettered_as_the_callers(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid, outbox_id = pair_stack.unpublished_task(api_key, {"input": "replaced below"})
    _plant_poison(pair_stack, cid, "input")
    with pair_stack.db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
    assert row is not None
    pair_stack.ctx.publisher.publish([row])

    def letter() -> DeadLetter | None:
        with pair_stack.db.transaction() as session:
            return session.scalars(select(DeadLetter).where(DeadLetter.correlation_id == cid)).first()

    _wait(lambda: letter() is not None, what="dead letter")
    found = letter()
    assert found is not None and found.kind == "submit" and found.fault == "caller" and found.attempts == 1
    assert f"nested {POISON_DEPTH} levels deep" in found.error and "at most 32" in found.error
    assert _column(pair_stack, cid, "state") == "failed"
    with pair_stack.db.transaction() as session:
        done = session.get(OutboxMessage, outbox_id)
        assert done is not None
        assert done.done_at is not None  # nothing left to loop on
    pair_stack.callbacks.wait_for(
        lambda _: any(
            r.json()["type"] == "task.completed" and r.json()["state"] == "failed"
            for r in pair_stack.callbacks.posts_to(path)
        ),
        timeout=20,
    )
    assert pair_stack.vendor("GET", f"/jobs?reference={cid}").json()["jobs"] == []


# --- beat jobs select neither input nor outcome -------------------------------------------------


@contextmanager
def _selects_of_this_thread(stack: Stack) -> Iterator[list[str]]:
    """Every SELECT this thread sends (the worker's threads share the engine: theirs are left out)."""
    seen: list[str] = []
    me = threading.get_ident()

    def record(
        conn: object, cursor: object, statement: str, parameters: object, context: object, executemany: bool
    ) -> None:
        if threading.get_ident() == me and statement.lstrip().upper().startswith("SELECT"):
            seen.append(" ".join(statement.split()))

    event.listen(stack.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(stack.db.engine, "before_cursor_execute", record)


def _select_list(statement: str) -> str:
    return statement[: statement.upper().find(" FROM ")]


def test_beat_jobs_and_reconciliation_select_neither_input_nor_outcome(pair_stack: Stack, vendor_secret: str) -> None:
    api_key, _, _ = pair_stack.new_client()
    overdue = due_work.overdue_task(pair_stack, api_key)
    due_work.lost_submit(pair_stack, api_key)
    quiet = due_work.quiet_finished_task(pair_stack, api_key)
    due_work.old_processed_message(pair_stack)
    orphan = due_work.stale_orphan(pair_stack, vendor_secret)
    stuck, _ = pair_stack.unpublished_task(api_key, {"input": "never reached the broker"})
    settings, ctx, now = pair_stack.settings, pair_stack.ctx, utcnow()

    with _selects_of_this_thread(pair_stack) as selects:
        assert check_deadlines(ctx, now) >= 1
        assert ctx.publisher.sweep(now, settings.outbox_grace_s, settings.outbox_lease_s) >= 1
        prune_processed_messages(ctx.db, now, settings.processed_retention_s)
        with ctx.db.transaction() as session:
            assert flag_stale_orphans(session, now, settings.orphan_window_s, settings.beat_batch) >= 1
        report = reconcile(ctx, now + QUIET, sleep=lambda _: None)
    assert report.applied >= 1 and report.redriven >= 1

    on_tasks = [s for s in selects if "external_tasks" in s]
    assert on_tasks, "the beat jobs read no task at all: nothing was tested"
    for column in ("external_tasks.input", "external_tasks.outcome"):
        assert not [s for s in selects if column in _select_list(s)], f"{column} was selected: {selects}"
    assert not [s for s in selects if "outbox_messages.payload" in _select_list(s)]
    assert not [s for s in selects if "orphan_events.payload AS" in _select_list(s)]
    # and the work was done
    assert pair_stack.wait_for_task(api_key, quiet)["outcome"] == {"quiet": True}
    assert "deadline.exceeded" in [e["kind"] for e in pair_stack.get(api_key, overdue)["timeline"]]
    assert due_work.orphan_flagged(pair_stack, orphan)
    assert pair_stack.wait_for_task(api_key, stuck)["state"] == "succeeded"
