"""The writes that change a task's state, and what a finished delivery causes.

Each function runs inside the caller's transaction and returns the outbox rows it wrote, so the
caller commits once and publishes after the commit. ``now`` is always passed in. Every state change
goes through :func:`core.states.transition` / :func:`core.states.decide`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm import Session

from core.states import RELAYED, TERMINAL, State, transition
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service import dispatch, ordering
from service.claims import lock_task
from service.outbox_rows import add_event, add_event_finishing, add_relay


def move(
    session: Session,
    task: ExternalTask,
    target: State,
    now: datetime,
    *,
    finishing: OutboxMessage | None = None,
    **detail: Any,
) -> list[OutboxMessage]:
    """Apply a validated move and write the relay row the domain app must receive. ``finishing``:
    the outbox row whose outcome this move is (a submission's), written with the move's event where
    the database can (``service.outbox_rows.add_event_finishing``)."""
    previous = task.state
    task.state = transition(task.state, target).value
    task.updated_at = task.checked_at = now
    if target in TERMINAL:
        task.next_attempt_at = None
    event = (f"state.{target.value}", {"previous": previous, **detail})
    callback_type = RELAYED.get(target)
    if callback_type is None:
        add_event_finishing(session, task, finishing, event[0], now, **event[1])
        dispatch.moved(session, task, previous, target, now)  # room in its client's window, its vendor, its key
        return []
    # the event, the relay and the task's changes so far in one statement where the database can
    relay = add_relay(session, task, callback_type, now, event=event, outcome=_relayed_outcome(task, target))
    dispatch.moved(session, task, previous, target, now)
    return [relay]


def _relayed_outcome(task: ExternalTask, target: State) -> Any:
    """The outcome a relay carries. An acceptance has none of its own: only what its event brought
    (already set on the task). A task short of its final state has no stored outcome, so an unloaded
    one is not read: webhooks and reconciliation then load no outcome at all for ``accepted``."""
    if target is State.ACCEPTED and "outcome" in inspect(task).unloaded:
        return None
    return task.outcome


def note_rate_limited(session: Session, task_id: int, now: datetime) -> None:
    """A released submission waits for a slot of its vendor's rate limit: the task says so until it
    reaches the vendor (``record_submission`` clears it), and its timeline says so once per wait.
    One UPDATE; the event only when the UPDATE changed the task."""
    if store_of(session).vendor_jobs.note_rate_limited(session, task_id):
        store_of(session).timeline.add(session, task_id, "submit.rate_limited", now, {})


def record_attempt_failure(
    session: Session, outbox: OutboxMessage, error: str, next_attempt_at: datetime | None, now: datetime
) -> None:
    """One failed attempt, visible on the task's timeline with when the next one is due."""
    store_of(session).outbox.attempt_failed(outbox, next_attempt_at)  # ended normally: not a poison message
    if outbox.task_id is None:
        return
    task = lock_task(session, outbox.task_id)
    task.attempts += outbox.kind == OutboxKind.SUBMIT
    task.last_error = error
    task.next_attempt_at = next_attempt_at
    add_event(
        session,
        task,
        f"{outbox.kind}.attempt_failed",
        now,
        attempt=outbox.attempts,
        error=error,
        next_attempt_at=next_attempt_at.isoformat() if next_attempt_at else None,
    )


def settle_retry(session: Session, task: ExternalTask, finished: OutboxMessage) -> None:
    """``finished`` no longer waits for another attempt (done, parked or dead-lettered).

    A task shows as retrying while any of its outbox rows waits for one, so its ``next_attempt_at``
    becomes the earliest of the others, and ``last_error`` goes once none is left: a relay that
    needed one retry must not leave its task looking like it is still retrying.
    """
    pending = store_of(session).outbox.next_retry_at(session, task.id, finished.id)
    task.next_attempt_at = pending
    if pending is None:
        task.last_error = None


def mark_done(session: Session, outbox: OutboxMessage, now: datetime, event: str, **detail: Any) -> None:
    store_of(session).outbox.finish(outbox, now)
    finished(session, outbox, now, event, **detail)


def finished(
    session: Session, outbox: OutboxMessage, now: datetime, event: str, *, event_written: bool = False, **detail: Any
) -> None:
    """What a row just marked done causes (its ``done_at`` and ``attempts`` already written).
    ``event_written``: the timeline entry went in the statement that finished the row
    (``service.claims.finish_delivered``)."""
    retried = outbox.attempts > 1 or outbox.next_attempt_at is not None
    if outbox.task_id is None:
        return
    if retried:
        # Only a row that failed an attempt can be what shows its task as retrying, so only then is
        # the task row written, and so locked: a first-time delivery leaves it free for the beat
        # jobs' SKIP LOCKED claims, and reads nothing of it.
        settle_retry(session, lock_task(session, outbox.task_id), outbox)
    if not event_written:
        store_of(session).timeline.add(session, outbox.task_id, event, now, {"message_id": outbox.message_id, **detail})
    ordering.settled(session, outbox, now)
