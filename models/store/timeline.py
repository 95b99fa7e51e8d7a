"""A task's timeline: every request, attempt, event and callback, in order (``task_events``).

One verb writes an entry, :meth:`Timeline.add`, wherever it goes: a lone entry, or one that ends a
change whose task (and outbox row) still have pending column changes. SQLite writes the entry in a
statement of its own (a Core ``INSERT``: the timeline is never read back in the writing
transaction, so it skips the unit of work) and leaves the changes to the flush; PostgreSQL writes
the entry and those changes in one statement (``models.store.postgres_rows.insert_event_with``).
The entries that go with a new outbox row, a new task or a delivered relay are written by those
rows' statements (``models.store.outbox``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from models.messages import OutboxMessage
from models.store.postgres_rows import insert_event_with
from models.task import ExternalTask, TaskEvent

#: rows whose pending column changes an entry may take along (a task, the outbox row its change ends)
Changed = tuple[ExternalTask | OutboxMessage, ...]


class Timeline:
    def add(
        self, session: Session, task_id: int, kind: str, at: datetime, detail: dict[str, Any], changed: Changed = ()
    ) -> None:
        """Write one entry of task ``task_id``. ``changed``: the task (and the outbox row its change
        ends) whose pending column changes may go in the same statement where the database can."""
        add_entry(session, task_id, kind, at, detail)


class SqliteTimeline(Timeline):
    """The entry alone; the flush writes the changes."""


class PostgresTimeline(Timeline):
    def add(
        self, session: Session, task_id: int, kind: str, at: datetime, detail: dict[str, Any], changed: Changed = ()
    ) -> None:
        if changed:
            insert_event_with(session, (task_id, kind, at, detail), changed)
        else:
            add_entry(session, task_id, kind, at, detail)


def add_entry(session: Session, task_id: int, kind: str, at: datetime, detail: dict[str, Any]) -> None:
    """The entry alone, as a Core INSERT (the timeline is written on every step of every task and
    never read back in the writing transaction: an ORM object, its flush and its id fetched back
    cost more CPU than the INSERT)."""
    session.execute(_INSERT_ENTRY, {"task_id": task_id, "at": at, "kind": kind, "detail": detail})


_INSERT_ENTRY = insert(cast(Table, TaskEvent.__table__))
