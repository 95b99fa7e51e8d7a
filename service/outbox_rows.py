"""The rows a change writes beside it in the caller's transaction: timeline events, outbox rows and
the relays (callbacks) a domain app must receive, numbered in order under the task's row lock.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.ordering import next_sequence
from core.states import COMPLETED_CALLBACK
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from wire.channel_messages import row_message_id

#: a timeline entry written with an outbox row: its kind and detail
Event = tuple[str, dict[str, Any]]


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def add_event(session: Session, task: ExternalTask, kind: str, now: datetime, **detail: Any) -> None:
    """A timeline entry of ``task``. On PostgreSQL the task's pending changes go in the entry's
    statement (``models.store.postgres_rows``): the flush would send them in one of their own."""
    store_of(session).timeline.add(session, task.id, kind, now, detail, (task,))


def add_event_finishing(
    session: Session, task: ExternalTask, finishing: OutboxMessage | None, kind: str, now: datetime, **detail: Any
) -> None:
    """:func:`add_event` for a change that ends the outbox row ``finishing`` (a submission's answer):
    on PostgreSQL that row's pending changes go in the same statement too."""
    store_of(session).timeline.add(
        session, task.id, kind, now, detail, (task,) if finishing is None else (task, finishing)
    )


def add_outbox(
    session: Session,
    kind: str,
    task: ExternalTask,
    now: datetime,
    *,
    parked_reason: str | None = None,
    event: Event | None = None,
    **payload: Any,
) -> OutboxMessage:
    """``parked_reason``: the row waits unpublished until something releases it (a queued submission).
    ``event``: the timeline entry (kind, detail) that goes with the row, written with it; on
    PostgreSQL the two and the task's pending changes go in one statement (``models.store.postgres_rows``),
    elsewhere one each."""
    row = _new_row(session, kind, task, now, parked_reason, payload)
    entry = None if event is None else (task.id, event[0], now, event[1])
    return store_of(session).outbox.add_row(session, row, task, entry)


def add_new_task(session: Session, task: ExternalTask, now: datetime, event: Event) -> OutboxMessage | None:
    """Insert a new, released ``task`` with its first timeline ``event`` and its ``submit`` row, on
    PostgreSQL in one statement that does nothing when a request made before holds the task's
    correlation id or Idempotency-Key (None: the caller looks for that one); elsewhere as a flush and
    an insert each (a conflict raises ``IntegrityError`` at the flush)."""
    row = _new_row(session, OutboxKind.SUBMIT, task, now, None, {})
    return row if store_of(session).outbox.add_new_task(session, task, row, (event[0], now, event[1])) else None


def _new_row(
    session: Session, kind: str, task: ExternalTask, now: datetime, parked_reason: str | None, payload: dict[str, Any]
) -> OutboxMessage:
    return store_of(session).outbox.new_row(
        kind,
        payload.pop("message_id", None) or new_message_id(),
        payload,
        now,
        task_id=task.id,
        correlation_id=task.correlation_id,
        sequence=payload.get("sequence"),
        parked_reason=parked_reason,
    )


def add_relay(
    session: Session,
    task: ExternalTask,
    callback_type: str,
    now: datetime,
    *,
    with_channel: bool = True,
    event: Event | None = None,
    **fields: Any,
) -> OutboxMessage:
    """Every callback of a task is written here, under the task's row lock: it takes the next
    number of the task's sequence (``core.ordering``) and carries the task's state at that point,
    so a domain app can discard anything older than what it holds. A completion after an earlier
    one (a replay reopened the task) names the one it ``supersedes``.

    The counter is a column of the task row the state change writes anyway: numbering costs no
    statement.

    A task of a client on a broker channel (``task.channel``) gets a second row, of kind
    ``channel``, with the same body and ``message_id`` (its own row id is derived from it:
    ``wire.channel_messages.row_message_id``) and no ``sequence`` column (that place is the
    HTTP relay's): the channel task publishes a task's rows in the order they were written.
    ``with_channel=False``: the relay alone, when an unsent channel row takes this callback in
    place (``service.progress``, a coalesced progress report). ``event``: as for :func:`add_outbox`.
    """
    task.relay_seq = next_sequence(task.relay_seq)
    message_id = new_message_id()
    supersedes = None
    if callback_type == COMPLETED_CALLBACK:
        supersedes, task.completion_message_id = task.completion_message_id, message_id
    relay = add_outbox(
        session,
        OutboxKind.RELAY,
        task,
        now,
        event=event,
        message_id=message_id,
        type=callback_type,
        correlation_id=task.correlation_id,
        sequence=task.relay_seq,
        state=task.state,
        supersedes=supersedes,
        occurred_at=now.isoformat(),
        **fields,
    )
    if task.channel is not None and with_channel:
        add_channel_event(session, task.id, task.correlation_id, dict(relay.payload, message_id=message_id), now)
    return relay


def add_channel_event(
    session: Session, task_id: int | None, correlation_id: str | None, body: dict[str, Any], now: datetime
) -> OutboxMessage:
    """An event for the client's broker channel: ``body`` is what is signed and sent, its
    ``message_id`` the event's own (the HTTP callback's, for a task event)."""
    row = store_of(session).outbox.new_row(
        OutboxKind.CHANNEL,
        row_message_id(body["message_id"]),
        body,
        now,
        task_id=task_id,
        correlation_id=correlation_id,
    )
    session.add(row)
    session.flush()
    return row
