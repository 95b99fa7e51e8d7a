"""What retention may remove, kind by kind: the query that finds a kind's due rows and the
statements that delete them (and, for a task, every row that belongs to it). ``service.retention``
runs them in batches.

What "finished" means for each kind (nothing open is ever removed):

- ``tasks``: a task in a final state whose last change (``updated_at``) is older than the cutoff,
  together with every row that belongs to it: its events, its outbox rows, and any other table with
  a foreign key to ``external_tasks`` (found from the metadata, so a table added later is covered
  or the delete fails loudly). A finished task is **kept** while one of its outbox rows is not done
  (an undelivered or parked callback) or one of them has an open dead letter (it may be replayed,
  which may reopen the task): the task is removed by a later run, once that is settled.
- ``outbox``: done rows older than the cutoff, except one an open dead letter names (replay
  re-drives that very row) and any row of a task that may still change (open, or finished but held
  as above): a task's callback history stays whole while more callbacks can follow. So this kind
  removes rows whose task is gone, or finished and settled while its own retention is longer.
- ``dead_letters``: replayed or discarded letters closed before the cutoff. Open ones never.
- ``incidents``: resolved before the cutoff. Open ones never.
- ``notifications``: notices settled (sent, muted or unrouted) before the incidents' cutoff; a
  pending one never (models.notifications).
- ``orphans``: orphan events resolved (bound) or discarded before the cutoff. Open ones never.
- ``processed_messages``: the inbox's dedup records (``LIAISON_PROCESSED_RETENTION_S``).

Each query locks the rows it returns ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two runs at once
take disjoint batches and a task a worker holds is skipped, not waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, Select, Table, delete, exists, or_, select, text
from sqlalchemy.orm import Session, aliased

from core.states import TERMINAL
from models.attention import Incident, OrphanEvent
from models.base import Base
from models.messages import DeadLetter, OutboxMessage, ProcessedMessage
from models.notifications import PENDING, Notification
from models.task import FINISHED, ExternalTask

FINAL_STATES = sorted(state.value for state in TERMINAL)

#: the table of every kind but ``tasks`` (a task takes the rows that belong to it along)
TABLES: Mapping[str, Table] = {
    "outbox": OutboxMessage.__table__,  # type: ignore[dict-item]
    "dead_letters": DeadLetter.__table__,  # type: ignore[dict-item]
    "incidents": Incident.__table__,  # type: ignore[dict-item]
    "notifications": Notification.__table__,  # type: ignore[dict-item]
    "orphans": OrphanEvent.__table__,  # type: ignore[dict-item]
    "processed_messages": ProcessedMessage.__table__,  # type: ignore[dict-item]
}


def task_dependents() -> list[Column[Any]]:
    """Every column that points at a task: foreign keys to ``external_tasks`` (from the metadata,
    so a table another change adds is found without editing this list) and the outbox's
    ``task_id`` (no foreign key: rows outlive nothing, but belong to their task)."""
    found: list[Column[Any]] = [OutboxMessage.__table__.columns["task_id"]]  # type: ignore[list-item]
    for table in Base.metadata.sorted_tables:
        for fk in table.foreign_keys:
            if fk.column.table.name == ExternalTask.__tablename__ and fk.parent is not found[0]:
                found.append(fk.parent)
    return found


# --- what is due, per kind -------------------------------------------------------------------------
#
# Each query repeats its index's predicate word for word (a partial index is used only then) and
# orders by the indexed column, so a run with nothing due reads one index page per kind.


def _open_outbox_of_task() -> ColumnElement[bool]:
    return exists().where(OutboxMessage.task_id == ExternalTask.id, OutboxMessage.done_at.is_(None))


def _open_letter_of_task() -> ColumnElement[bool]:
    return exists().where(
        OutboxMessage.task_id == ExternalTask.id,
        DeadLetter.outbox_id == OutboxMessage.id,
        text("dead_letters.state = 'open'"),
    )


def _open_letter_of_outbox() -> ColumnElement[bool]:
    return exists().where(DeadLetter.outbox_id == OutboxMessage.id, text("dead_letters.state = 'open'"))


def _task_may_change() -> ColumnElement[bool]:
    """The outbox row's task is open, or finished but held (a row of it undone or with an open
    letter): its callback history (sequence, what a replayed completion supersedes) stays whole."""
    task, sibling, letter = aliased(ExternalTask), aliased(OutboxMessage), aliased(DeadLetter)
    held = exists().where(
        sibling.task_id == task.id,
        or_(
            sibling.done_at.is_(None),
            exists().where(letter.outbox_id == sibling.id, letter.state == "open"),
        ),
    )
    return exists().where(task.id == OutboxMessage.task_id, or_(task.state.not_in(FINAL_STATES), held))


def due_query(kind: str, cutoff: datetime, batch: int) -> Select[tuple[int]]:
    """The ids of up to ``batch`` rows of ``kind`` due for removal, oldest first, locked (SKIP LOCKED)."""
    if kind == "tasks":
        query = (
            select(ExternalTask.id)
            .where(text(FINISHED), ExternalTask.updated_at < cutoff)
            .where(~_open_outbox_of_task(), ~_open_letter_of_task())
            .order_by(ExternalTask.updated_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True, of=ExternalTask)
    if kind == "outbox":
        query = (
            select(OutboxMessage.id)
            .where(OutboxMessage.done_at < cutoff, ~_open_letter_of_outbox(), ~_task_may_change())
            .order_by(OutboxMessage.done_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True, of=OutboxMessage)
    if kind == "dead_letters":
        query = (
            select(DeadLetter.id)
            .where(DeadLetter.closed_at < cutoff, DeadLetter.state != "open")
            .order_by(DeadLetter.closed_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True)
    if kind == "incidents":
        query = select(Incident.id).where(Incident.resolved_at < cutoff).order_by(Incident.resolved_at)
        return query.limit(batch).with_for_update(skip_locked=True)
    if kind == "notifications":
        query = (
            select(Notification.id)
            .where(Notification.dispatched_at < cutoff, Notification.state != PENDING)
            .order_by(Notification.dispatched_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True)
    if kind == "orphans":
        query = (
            select(OrphanEvent.id)
            .where(OrphanEvent.resolved_at < cutoff, OrphanEvent.state != "open")
            .order_by(OrphanEvent.resolved_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True)
    if kind == "processed_messages":
        query = (
            select(ProcessedMessage.id)
            .where(ProcessedMessage.processed_at < cutoff)
            .order_by(ProcessedMessage.processed_at)
        )
        return query.limit(batch).with_for_update(skip_locked=True)
    raise ValueError(f"unknown retention kind {kind!r}")


def remove(session: Session, kind: str, ids: Sequence[int]) -> None:
    """Delete the rows of ``kind`` (a task with every row that belongs to it)."""
    if kind != "tasks":
        table = TABLES[kind]
        session.execute(delete(table).where(table.c.id.in_(ids)))
        return
    for column in task_dependents():
        session.execute(delete(column.table).where(column.in_(ids)))
    session.execute(delete(ExternalTask).where(ExternalTask.id.in_(ids)))
