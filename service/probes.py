"""Asking the vendor before escalating: the heartbeat check's claims, and what a ``probe``'s answer
does (``core.deadlines``). The probe's call is made by ``workers.tasks.probe``, outside any
transaction; these functions run in its record transaction, with the task row locked."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.deadlines import HEARTBEAT, VendorAnswer, at_deadline, at_heartbeat, heartbeat_due, still_awaited
from models.messages import OutboxMessage
from models.store import store_of
from models.store.lifecycle import heartbeats_due_query
from models.task import ExternalTask
from service.lifecycle import ask_vendor, escalate
from service.outbox_rows import add_event
from service.reconciliation import apply_snapshot
from service.transitions import mark_done


def lock_task_without_payload(session: Session, task_id: int) -> ExternalTask:
    """The task, row-locked, without its input or outcome: a probe reads neither (a final answer
    brings its own outcome), and rows stored before their limits may not even decode."""
    return store_of(session).lifecycle.lock_without_payload(session, task_id)


#: the heartbeat check's claim, as a statement (for EXPLAIN's readers: ``bench/beat_jobs.py``,
#: ``tests/integration/test_beat_safety.py``); :func:`claim_silent` calls the store's verb
silent_query = heartbeats_due_query


def claim_silent(session: Session, now: datetime, batch: int) -> tuple[int, list[OutboxMessage]]:
    """No vendor event for ``heartbeat_timeout_s``: ask the vendor (a probe). The heartbeat is
    disarmed while the probe is out (so the next run does not ask again); the vendor's next event,
    or its answer that the job is still open, arms it again."""
    tasks = store_of(session).lifecycle.heartbeats_due(session, now, batch)
    rows: list[OutboxMessage] = []
    for task in tasks:
        due_at = task.heartbeat_due_at
        assert due_at is not None  # the query's predicate
        task.heartbeat_due_at = None
        rows += ask_vendor(session, task, HEARTBEAT, due_at, now)
    return len(tasks), rows


def skip_probe(session: Session, row: OutboxMessage, task: ExternalTask, now: datetime) -> str | None:
    """Done with nothing to do, when what the probe was about is settled already: the deadline was
    met (the task was accepted, or is final, meanwhile), or for a heartbeat the vendor has spoken
    since the probe was written (its event re-armed the heartbeat)."""
    reason = str(row.payload.get("reason"))
    if not still_awaited(reason, task.state):
        why = f"task is {task.state}"
    elif reason == HEARTBEAT and task.last_event_at is not None and task.last_event_at > row.created_at:
        why = "the vendor has spoken since"
    else:
        return None
    mark_done(session, row, now, "probe.skipped", reason=why)
    return "skipped"


def settle_probe(
    session: Session,
    row: OutboxMessage,
    task: ExternalTask,
    answer: VendorAnswer,
    now: datetime,
    *,
    status: str | None = None,
    outcome: Any = None,
    note: str | None = None,
) -> str:
    """What the vendor answered, applied to the (locked) task; the row is done. A final status goes
    through the webhook's path (``apply_snapshot``) instead of an escalation; an open job re-arms
    a heartbeat; otherwise the escalation, saying what the vendor answered. A task that no longer
    waits for what the deadline was about (accepted, or final, meanwhile) is left alone."""
    # Never dated before its claim: beat and the worker may run on hosts whose clocks differ a
    # little (and tests move beat's clock ahead), and lateness is measured from the claim on.
    now = max(now, row.created_at)
    if (skipped := skip_probe(session, row, task, now)) is not None:
        return skipped
    reason = str(row.payload.get("reason"))
    deadline_at = datetime.fromisoformat(str(row.payload["deadline_at"]))
    step = at_heartbeat(answer) if reason == HEARTBEAT else at_deadline(answer, task.on_deadline, reason)
    if step.apply:
        assert status is not None and task.vendor_job_id is not None  # a final answer has its status
        apply_snapshot(session, task.provider, task.vendor_job_id, status, outcome, now)
        result = "applied"
    elif step.rearm:
        task.heartbeat_due_at = heartbeat_due(now, task.heartbeat_timeout_s)
        add_event(session, task, "heartbeat.vendor_answered", now, vendor_status=answer.value)
        result = "rearmed"
    else:
        escalate(session, task, reason, deadline_at, now, answer, note=note, cancel=step.cancel)
        result = "escalated"
    mark_done(session, row, now, "probe.done", reason=reason, vendor_status=status or answer.value, result=result)
    return result
