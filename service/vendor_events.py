"""What vendors tell us, applied forward-only: a job id (the submit's answer), events (webhooks and
reconciliation), and events that overtook the job id (orphans, bound once it is known).

Each function runs in the caller's transaction; the relays they write are published at commit
(``models.publishing``). Every state change goes through ``service.transitions.move``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.deadlines import heartbeat_due
from core.states import EventType, State, decide
from models.attention import OrphanEvent
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service.claims import lock_job, lock_task
from service.incidents import IncidentKind, resolve_open
from service.outbox_rows import add_event, add_event_finishing, add_outbox
from service.progress import relay_progress
from service.transitions import move
from webhooks.events import VendorEvent, parse_event


def record_submission(
    session: Session,
    outbox: OutboxMessage,
    job_id: str,
    now: datetime,
    task: ExternalTask | None = None,
    *,
    job_locked: bool = False,
) -> list[OutboxMessage]:
    """The vendor gave us a job id: remember it, move to ``submitted``, apply any early events.
    ``task``: the row's task, when the caller locked it already (``service.claims.claim_outbox_and_task``);
    ``job_locked``: with the job's lock (``service.claims.lock_job``), which this takes otherwise."""
    assert outbox.task_id is not None  # a submission's row always names its task
    task = task or lock_task(session, outbox.task_id)
    store_of(session).outbox.finish_unattempted(outbox, now)  # the attempt is the task's (below)
    out: list[OutboxMessage] = []
    if task.vendor_job_id is None:
        task.vendor_job_id = job_id
        if not job_locked:
            lock_job(session, task.provider, job_id)  # an early webhook for it commits before we look
    task.attempts += 1
    task.last_error = None
    task.next_attempt_at = None
    task.wait_reason = None  # no longer waiting for anything (a rate-limit slot)
    heard_from_vendor(task, now)  # the submit's answer starts the heartbeat
    if task.state == State.REQUESTED:
        out += move(session, task, State.SUBMITTED, now, finishing=outbox, attempt=task.attempts)
    else:
        add_event_finishing(session, task, outbox, "submission.late", now, state=task.state)
        if task.state in (State.CANCELED, State.CANCEL_REQUESTED):
            # Canceled while the submit was in flight: the vendor has the job now, so cancel it there.
            out.append(add_outbox(session, OutboxKind.CANCEL, task, now, reason="canceled before the vendor answered"))
    out += bind_orphans(session, task, now)
    return out


def bind_orphans(session: Session, task: ExternalTask, now: datetime) -> list[OutboxMessage]:
    """Events that overtook the submit response are applied now, in the order they arrived."""
    orphans = store_of(session).vendor_jobs.open_orphans(session, task.provider, task.vendor_job_id)
    out: list[OutboxMessage] = []
    for orphan in orphans:
        orphan.state = "resolved"
        orphan.resolved_at = now
        if orphan.flagged_at is not None:
            resolve_open(
                session, IncidentKind.ORPHAN_UNBOUND, f"orphan:{orphan.id}", now, f"bound to {task.correlation_id}"
            )
        out += _apply(session, task, parse_event(orphan.payload), orphan.message_id, now, bound=True)[1]
    return out


def _apply(
    session: Session, task: ExternalTask, event: VendorEvent, message_id: str, now: datetime, **detail: Any
) -> tuple[bool, list[OutboxMessage]]:
    """Apply an event forward-only; a stale one is recorded on the timeline and changes nothing.
    A progress report moves no state: it is relayed (``service.progress``)."""
    if event.type is EventType.PROGRESS and event.progress is not None:
        return relay_progress(session, task, event.progress, message_id, now, **detail)
    decision = decide(task.state, event.target)
    if decision.new_state is None:
        add_event(
            session,
            task,
            "event.ignored",
            now,
            event=event.type.value,
            message_id=message_id,
            reason=decision.reason,
        )
        return False, []
    if event.outcome is not None:
        task.outcome = event.outcome
    rows = move(session, task, decision.new_state, now, event=event.type.value, message_id=message_id, **detail)
    return True, rows


@dataclass(frozen=True)
class EventResult:
    status: str  # applied | ignored | duplicate | orphan
    outbox: list[OutboxMessage] = field(default_factory=list)
    traceparent: str | None = None  # the task's: the commit (and the relays it publishes) continue its trace


def first_time(session: Session, source: str, message_id: str, message_type: str, now: datetime) -> bool:
    """Record (source, message_id) in the inbox; False when it was there already.

    One ``INSERT … ON CONFLICT DO NOTHING RETURNING`` (the store's ``inbox.record``): the unique
    index decides, and a concurrent duplicate waits on it until the first transaction commits,
    then inserts nothing. The record commits with the caller's effect.
    """
    return store_of(session).inbox.record(session, source, message_id, message_type, now)


def job_of_reference(session: Session, source: str, reference: str) -> str | None:
    """The vendor job id of this provider's task with our ``reference``: None when there is no such
    task, "" while its submit's answer is not recorded (an event naming the reference waits)."""
    return store_of(session).vendor_jobs.job_of_reference(session, source, reference)


def _note_duplicate(session: Session, message_id: str, event: VendorEvent, now: datetime, task_id: int | None) -> None:
    """A message received again goes on its task's timeline (operators see every webhook, the
    duplicates too): it changes nothing of the task. Unknown job: nothing to note it on."""
    if task_id is not None:
        detail = {"event": event.type.value, "message_id": message_id, "reason": "message id already received"}
        store_of(session).timeline.add(session, task_id, "event.duplicate", now, detail)


def receive_event(session: Session, source: str, message_id: str, event: VendorEvent, now: datetime) -> EventResult:
    """Store and apply one verified vendor event, at most once per (source, message_id)."""
    inbox = store_of(session).inbox
    # on PostgreSQL the record and the look for the task are one statement
    found = inbox.record_and_find(session, source, message_id, event.type.value, event.job_id, now)
    if not found.first:
        _note_duplicate(session, message_id, event, now, found.task_id)
        return EventResult("duplicate")
    task = found.task
    if task is None and lock_job(session, source, event.job_id):
        # The submission may be setting this job id right now: once it has committed, look again
        # (a statement of its own: its snapshot must be taken after the lock; on PostgreSQL it also
        # keeps the orphan when it still finds nothing). Only a miss takes the lock: a task found
        # under its row lock is settled already.
        task = inbox.task_or_orphan(session, source, message_id, event.job_id, event.as_payload(), now)
        if task is None:
            return EventResult("orphan")
    if task is None:
        session.add(
            OrphanEvent(
                source=source,
                message_id=message_id,
                vendor_job_id=event.job_id,
                payload=event.as_payload(),
                received_at=now,
            )
        )
        return EventResult("orphan")
    heard_from_vendor(task, now)
    applied, rows = _apply(session, task, event, message_id, now)
    return EventResult("applied" if applied else "ignored", rows, task.traceparent)


def heard_from_vendor(task: ExternalTask, now: datetime) -> None:
    """The vendor spoke about this task: the one place its last event time is stamped, and its
    heartbeat moved on (``core.deadlines.heartbeat_due``). Every verified vendor event for a known
    task passes here (``receive_event``: webhooks of every type, reconciled answers, orphans bound
    later go through the submission's stamp), and it writes only columns of the task row the
    event's own UPDATE writes anyway, so it costs no statement on the happy path."""
    task.last_event_at = now
    task.heartbeat_due_at = heartbeat_due(now, task.heartbeat_timeout_s)
