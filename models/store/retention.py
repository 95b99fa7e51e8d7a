"""What retention may remove, kind by kind (``service.retention`` runs it in batches): the query
that finds a kind's due rows, the rows a batch is about to remove (its export,
``service.retention_export``) and the statements that delete them (for a task, with every row that
belongs to it).

Both databases run the same statements (``FOR UPDATE SKIP LOCKED`` is PostgreSQL's; SQLite's
compiler leaves it out, and its ``BEGIN IMMEDIATE`` runs batches one after the other), so one class
serves both stores.

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

The tables are looked up in the metadata by name when a statement is built (``models/__init__``
has mapped every one by then), so a kind is a name and the table modules need not be imported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, Select, Table, delete, exists, or_, select, text
from sqlalchemy.orm import Session, aliased

from core.states import TERMINAL
from models.attention import Incident, OrphanEvent
from models.base import Base
from models.messages import DeadLetter, OutboxMessage, ProcessedMessage
from models.task import FINISHED, ExternalTask

FINAL_STATES = sorted(state.value for state in TERMINAL)
#: a notice not yet settled (``models.notifications.PENDING``; the contract test holds them equal)
NOTICE_PENDING = "pending"

#: the table of every kind but ``tasks`` (a task takes the rows that belong to it along), by name
TABLE_NAMES = {
    "outbox": OutboxMessage.__tablename__,
    "dead_letters": DeadLetter.__tablename__,
    "incidents": Incident.__tablename__,
    "notifications": "notifications",
    "orphans": OrphanEvent.__tablename__,
    "processed_messages": ProcessedMessage.__tablename__,
}


def table_of(kind: str) -> Table:
    """The table of ``kind`` (any kind but ``tasks``)."""
    return Base.metadata.tables[TABLE_NAMES[kind]]


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


class Pruning:
    """Retention's verbs, alike on both databases."""

    def due(self, session: Session, kind: str, cutoff: datetime, batch: int) -> list[int]:
        """The ids of up to ``batch`` rows of ``kind`` due for removal (finished before ``cutoff``),
        oldest first, locked for the rest of the transaction (PostgreSQL: rows another transaction
        holds are skipped)."""
        return list(session.scalars(due_query(kind, cutoff, batch)))

    def rows(self, session: Session, kind: str, ids: Sequence[int]) -> list[dict[str, Any]]:
        """The rows ``ids`` of ``kind`` (any kind but ``tasks``), column by column: what the export writes."""
        table = table_of(kind)
        return _rows(session, table, table.c.id, ids)

    def tasks_with_rows(
        self, session: Session, ids: Sequence[int]
    ) -> list[tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]]:
        """The tasks ``ids``, each with every row that belongs to it by table name (:func:`task_dependents`):
        one statement for the tasks, one per table that points at them."""
        tasks = _rows(session, ExternalTask.__table__, ExternalTask.__table__.c.id, ids)
        owned: dict[int, dict[str, list[dict[str, Any]]]] = {t["id"]: {} for t in tasks}
        for column in task_dependents():
            for row in _rows(session, column.table, column, ids):
                owned[row[column.key]].setdefault(column.table.name, []).append(row)
        return [(task, owned[task["id"]]) for task in tasks]

    def remove(self, session: Session, kind: str, ids: Sequence[int]) -> None:
        """Delete the rows ``ids`` of ``kind`` (a task with every row that belongs to it, those first)."""
        if kind != "tasks":
            table = table_of(kind)
            session.execute(delete(table).where(table.c.id.in_(ids)))
            return
        for column in task_dependents():
            session.execute(delete(column.table).where(column.in_(ids)))
        session.execute(delete(ExternalTask).where(ExternalTask.id.in_(ids)))


def _rows(session: Session, table: Any, column: Any, ids: Sequence[int]) -> list[dict[str, Any]]:
    return [dict(row) for row in session.execute(select(table).where(column.in_(ids))).mappings()]


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


def _finished_before(
    row_id: Any, finished: Any, cutoff: datetime, batch: int, *still: ColumnElement[bool]
) -> Select[tuple[int]]:
    """A simple kind's due rows: finished (``finished``, its time) before ``cutoff`` and, with
    ``still``, not open either; oldest first, up to ``batch``, locked (SKIP LOCKED)."""
    query = select(row_id).where(finished < cutoff, *still).order_by(finished)
    return query.limit(batch).with_for_update(skip_locked=True)


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
        return _finished_before(DeadLetter.id, DeadLetter.closed_at, cutoff, batch, DeadLetter.state != "open")
    if kind == "incidents":
        return _finished_before(Incident.id, Incident.resolved_at, cutoff, batch)
    if kind == "notifications":
        notices = table_of(kind)
        return _finished_before(notices.c.id, notices.c.dispatched_at, cutoff, batch, notices.c.state != NOTICE_PENDING)
    if kind == "orphans":
        return _finished_before(OrphanEvent.id, OrphanEvent.resolved_at, cutoff, batch, OrphanEvent.state != "open")
    if kind == "processed_messages":
        return _finished_before(ProcessedMessage.id, ProcessedMessage.processed_at, cutoff, batch)
    raise ValueError(f"unknown retention kind {kind!r}")
