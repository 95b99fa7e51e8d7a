"""The task lifecycle beyond the happy path: cancellation, deadlines, reconciliation, orphans.

Beat jobs call these inside one transaction per batch. Every query repeats a partial index's
predicate (``models.task``) so it touches only rows that can be due, and claims them with
``FOR NO KEY UPDATE SKIP LOCKED`` (SQLite: the transaction's ``BEGIN IMMEDIATE``), so two beats, or a
run overlapping the next, never act on one row twice. NO KEY: a plain ``FOR UPDATE`` would also
skip every task that another transaction is merely referencing (inserting a TaskEvent takes a key
share lock on its task), leaving it out of this run for no reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Select, select, text, update
from sqlalchemy.orm import Session, load_only

from core.states import TERMINAL, EventType, State
from models.attention import OrphanEvent
from models.dead_letters import NotReplayable
from models.incidents import IncidentKind, open_incident, resolve_open
from models.isolation import in_savepoint
from models.messages import PUBLISH_COLUMNS, OutboxKind, OutboxMessage, ProcessedMessage
from models.publishing import publish_after_commit
from models.service import ServiceError, add_event, add_outbox, move
from models.task import AT_VENDOR, AWAITING_ACCEPTANCE, AWAITING_COMPLETION, NOT_SUBMITTED, ExternalTask
from models.vendor_events import EventResult, bind_orphans, first_time, receive_event
from webhooks.events import VendorEvent


class AlreadyFinal(ServiceError):
    def __init__(self, state: str) -> None:
        super().__init__(f"the task is already {state}")
        self.state = state


# --- Cancellation ---


class CancelKeyReused(ServiceError):
    """The cancel's Idempotency-Key was already used to cancel another task (→ 422)."""


#: ``message_type`` of the inbox rows written before cancel keys named their task: such a key is
#: taken as the same request again (what it meant then) until the inbox prunes it.
LEGACY_CANCEL_TYPE = "cancel"


def cancel_key_first_time(session: Session, client_id: int, task: ExternalTask, key: str, now: datetime) -> bool:
    """Record a cancel's Idempotency-Key, bound to its task; False when it is this request again.

    The key is unique per client in the inbox (``source=cancel:<client id>``) and its row names the
    task it canceled (``message_type=cancel:<task id>``), so the binding is data: the same key on
    another task, even from a concurrent request, meets the unique index and is refused.
    """
    bound_to = f"cancel:{task.id}"
    source = f"cancel:{client_id}"
    if first_time(session, source, key, bound_to, now):
        return True
    used_for = session.scalar(
        select(ProcessedMessage.message_type).where(
            ProcessedMessage.source == source, ProcessedMessage.message_id == key
        )
    )
    if used_for not in (bound_to, LEGACY_CANCEL_TYPE):
        raise CancelKeyReused("this Idempotency-Key was already used to cancel another task")
    return False


def request_cancel(session: Session, task: ExternalTask, reason: str, now: datetime) -> list[OutboxMessage]:
    """Cancel at the vendor through the outbox; a task the vendor never saw is canceled at once."""
    if task.state in TERMINAL:
        raise AlreadyFinal(task.state)
    if task.state == State.CANCEL_REQUESTED:
        return []
    if task.vendor_job_id is None:
        # Not at the vendor (yet): cancel here. If a submit is in flight, its answer finds the task
        # canceled and cancels the new job at the vendor (vendor_events.record_submission).
        task.outcome = {"canceled": reason}
        return move(session, task, State.CANCELED, now, reason=reason)
    rows = move(session, task, State.CANCEL_REQUESTED, now, reason=reason)
    rows.append(add_outbox(session, OutboxKind.CANCEL, task, now, reason=reason))
    return rows


# --- Deadlines ---


@dataclass(frozen=True)
class DeadlineRule:
    name: str
    column: Any
    escalated: str
    predicate: str


DEADLINES = (
    DeadlineRule("acceptance", ExternalTask.acceptance_deadline, "acceptance_escalated_at", AWAITING_ACCEPTANCE),
    DeadlineRule("execution", ExternalTask.execution_deadline, "execution_escalated_at", AWAITING_COMPLETION),
)


#: What the deadline check reads of a task: never ``input`` or ``outcome``, which are the caller's
#: and the vendor's data, possibly large, and (rows stored before their limits existed) possibly too
#: deep to decode at all.
DEADLINE_COLUMNS = (
    ExternalTask.id,
    ExternalTask.correlation_id,
    ExternalTask.state,
    ExternalTask.vendor_job_id,
    ExternalTask.acceptance_deadline,
    ExternalTask.execution_deadline,
    ExternalTask.on_deadline,
    ExternalTask.acceptance_escalated_at,
    ExternalTask.execution_escalated_at,
)


def due_query(rule: DeadlineRule, now: datetime, batch: int) -> Select:
    return (
        select(ExternalTask)
        .options(load_only(*DEADLINE_COLUMNS))
        .where(text(rule.predicate), rule.column <= now)
        .order_by(rule.column)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


def _escalate(session: Session, task: ExternalTask, rule: DeadlineRule, now: datetime) -> list[OutboxMessage]:
    deadline = getattr(task, rule.column.key)
    late_s = round((now - deadline).total_seconds(), 3)
    setattr(task, rule.escalated, now)
    add_event(session, task, "deadline.exceeded", now, deadline=rule.name, late_by_s=late_s)
    open_incident(
        session,
        IncidentKind.DEADLINE_EXCEEDED,
        f"{rule.name}:task:{task.id}",
        f"{rule.name} deadline {deadline.isoformat()} passed {late_s:.0f}s ago in state {task.state}",
        now,
        correlation_id=task.correlation_id,
    )
    # ``outcome`` is not read here: a task short of its final state has none yet (outcomes come
    # with completion; a failed submit's or a cancel's with their final state), so it is null.
    rows = [
        add_outbox(
            session,
            OutboxKind.RELAY,
            task,
            now,
            type="task.deadline_exceeded",
            correlation_id=task.correlation_id,
            state=task.state,
            outcome=None,
            occurred_at=now.isoformat(),
            deadline=rule.name,
            deadline_at=deadline.isoformat(),
            late_by_s=late_s,
        )
    ]
    if task.on_deadline == "cancel":
        rows += request_cancel(session, task, f"{rule.name} deadline exceeded", now)
    return rows


def escalate_due(session: Session, now: datetime, batch: int) -> tuple[int, list[OutboxMessage]]:
    """Escalate each overdue task once per deadline: ``task.deadline_exceeded`` to the domain app and
    an Incident; the task keeps running unless ``on_deadline=cancel``.

    Each task is escalated in a savepoint: one that fails is rolled back alone, gets a
    ``batch_row_failed`` incident and is marked escalated all the same (so the next run does not
    trip over it again, ahead of every other tenant's deadlines); the rest of the batch goes on.
    """
    escalated, rows = 0, []
    for rule in DEADLINES:
        due = session.scalars(due_query(rule, now, batch)).all()
        for task in due:
            task_id, correlation_id = task.id, task.correlation_id
            ok, out = in_savepoint(
                session, "check_deadlines", correlation_id, now, partial(_escalate, session, task, rule, now)
            )
            if ok:
                rows += out or []
                escalated += 1
            else:
                session.execute(
                    update(ExternalTask)
                    .where(ExternalTask.id == task_id)
                    .values({rule.escalated: now})
                    .execution_options(synchronize_session=False)
                )
    return escalated, rows


# --- Reconciliation ---


@dataclass(frozen=True)
class QuietTask:
    task_id: int
    correlation_id: str
    vendor_job_id: str


def quiet_query(provider: str, quiet_s: int, now: datetime, batch: int) -> Select:
    return (
        select(ExternalTask)
        .options(
            load_only(ExternalTask.id, ExternalTask.correlation_id, ExternalTask.vendor_job_id, ExternalTask.checked_at)
        )
        .where(
            text(AT_VENDOR),
            ExternalTask.provider == provider,
            ExternalTask.checked_at <= now - timedelta(seconds=quiet_s),
        )
        .order_by(ExternalTask.checked_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


def claim_quiet(session: Session, provider: str, quiet_s: int, now: datetime, batch: int) -> list[QuietTask]:
    """Tasks at the vendor with no news for ``quiet_s``, oldest first; claimed by moving checked_at."""
    tasks = session.scalars(quiet_query(provider, quiet_s, now, batch)).all()
    for task in tasks:
        task.checked_at = now
    return [QuietTask(t.id, t.correlation_id, t.vendor_job_id) for t in tasks if t.vendor_job_id]


def claim_unsubmitted(session: Session, quiet_s: int, now: datetime, batch: int) -> list[OutboxMessage]:
    """Tasks stuck in ``requested``: their submit rows, published again after commit (consumers are idempotent)."""
    tasks = session.scalars(
        select(ExternalTask)
        .options(load_only(ExternalTask.id, ExternalTask.checked_at))
        .where(text(NOT_SUBMITTED), ExternalTask.checked_at <= now - timedelta(seconds=quiet_s))
        .order_by(ExternalTask.checked_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    for task in tasks:
        task.checked_at = now
    if not tasks:
        return []
    rows = list(
        session.scalars(
            select(OutboxMessage)
            .options(load_only(*PUBLISH_COLUMNS))
            .where(
                OutboxMessage.task_id.in_([t.id for t in tasks]),
                OutboxMessage.kind == OutboxKind.SUBMIT,
                OutboxMessage.done_at.is_(None),
                OutboxMessage.parked_reason.is_(None),
                OutboxMessage.next_attempt_at.is_(None),  # a scheduled retry is not stuck
            )
        )
    )
    publish_after_commit(session, rows)  # again: consumers are idempotent
    return rows


_SNAPSHOT_EVENTS = {
    "running": EventType.ACCEPTED,
    "succeeded": EventType.COMPLETED,
    "failed": EventType.COMPLETED,
    "canceled": EventType.COMPLETED,
}


def apply_snapshot(
    session: Session, provider: str, job_id: str, status: str, outcome: Any, now: datetime
) -> EventResult | None:
    """What the vendor's status says, applied through exactly the webhook's path. The message id is
    derived from the job and status, so asking twice applies once."""
    event_type = _SNAPSHOT_EVENTS.get(status)
    if event_type is None:  # queued: nothing new
        return None
    event = VendorEvent(
        event_type,
        job_id,
        status if event_type is EventType.COMPLETED else None,
        outcome if event_type is EventType.COMPLETED else None,
    )
    message_id = f"reconcile:{job_id}:{status}"
    if len(message_id) > 200:
        message_id = "reconcile:" + hashlib.sha256(message_id.encode()).hexdigest()
    return receive_event(session, provider, message_id, event, now)


def unknown_job(session: Session, task: QuietTask, provider: str, error: str, now: datetime) -> None:
    open_incident(
        session,
        IncidentKind.UNKNOWN_JOB,
        f"job:{provider}:{task.vendor_job_id}",
        f"{provider} does not know job {task.vendor_job_id}: {error}",
        now,
        correlation_id=task.correlation_id,
    )


# --- Orphans ---


def flag_stale_orphans(session: Session, now: datetime, window_s: int, batch: int) -> int:
    """Open an incident for each orphan unbound past the window. The event's type is read in SQL
    (``payload->>'type'``): the payload holds the vendor's outcome, which is not loaded."""
    found = session.execute(
        select(OrphanEvent.id, OrphanEvent.source, OrphanEvent.vendor_job_id, OrphanEvent.payload["type"].as_string())
        .where(
            text("state = 'open' AND flagged_at IS NULL"), OrphanEvent.received_at <= now - timedelta(seconds=window_s)
        )
        .order_by(OrphanEvent.received_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    ).all()
    for orphan_id, source, job_id, event_type in found:
        session.execute(update(OrphanEvent).where(OrphanEvent.id == orphan_id).values(flagged_at=now))
        open_incident(
            session,
            IncidentKind.ORPHAN_UNBOUND,
            f"orphan:{orphan_id}",
            f"{event_type} from {source} for unknown job {job_id}",
            now,
        )
    return len(found)


def attach_orphan(session: Session, orphan: OrphanEvent, task: ExternalTask, now: datetime) -> list[OutboxMessage]:
    """An operator says which task an orphan belongs to: bind it (and its job's other orphans), apply."""
    if orphan.state != "open":
        raise NotReplayable(f"orphan {orphan.id} is {orphan.state}")
    if task.provider != orphan.source:
        raise NotReplayable(f"orphan came from {orphan.source}, the task runs at {task.provider}")
    if task.vendor_job_id not in (None, orphan.vendor_job_id):
        raise NotReplayable("the task is bound to another vendor job")
    task.vendor_job_id = orphan.vendor_job_id
    add_event(session, task, "orphan.attached", now, orphan_id=orphan.id)
    return bind_orphans(session, task, now)  # resolves the orphans' incidents too


def discard_orphan(session: Session, orphan: OrphanEvent, now: datetime) -> None:
    if orphan.state != "open":
        raise NotReplayable(f"orphan {orphan.id} is {orphan.state}")
    orphan.state, orphan.resolved_at = "discarded", now
    resolve_open(session, IncidentKind.ORPHAN_UNBOUND, f"orphan:{orphan.id}", now, "discarded")
