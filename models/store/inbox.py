"""The inbox's family: a message seen once (``processed_messages``), and the task a vendor's job
belongs to, found with it.

The unique ``(source, message_id)`` is the deduplication: an ``INSERT … ON CONFLICT DO NOTHING
RETURNING`` decides, and a concurrent duplicate waits on the index until the first transaction
commits, then inserts nothing. On PostgreSQL a vendor event's record and the look for its task
go in one statement (:meth:`PostgresInbox.record_and_find`), and so do the second look under the
job's lock and the orphan kept when it still finds nothing (:meth:`PostgresInbox.task_or_orphan`);
SQLite keeps one statement each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Select, bindparam, column, select
from sqlalchemy.orm import Session

from models.attention import OrphanEvent
from models.base import upsert
from models.messages import ProcessedMessage
from models.statements import built_once
from models.store.loaded import TASK_WITHOUT_PAYLOAD, execute
from models.store.outbox import WITHOUT_PAYLOAD
from models.task import ExternalTask


@dataclass(frozen=True)
class Found:
    """A vendor event's record: whether its message is new, and its job's task (row-locked) — or,
    for a duplicate, only the task's id where the database could not read the task with the record."""

    first: bool
    task: ExternalTask | None
    task_id: int | None


class Inbox:
    """The verbs both databases share."""

    def record(self, session: Session, source: str, message_id: str, message_type: str, now: datetime) -> bool:
        """Record (source, message_id); False when it was there already. Commits with the caller's effect."""
        params = {"source": source, "message_id": message_id, "message_type": message_type, "processed_at": now}
        return session.execute(_RECORD_MESSAGE, params).first() is not None

    def task_for_job(self, session: Session, source: str, job_id: str) -> ExternalTask | None:
        """The task that vendor job belongs to, row-locked. The outcome loads only if the event
        brings none and a relay must carry the task's own."""
        return session.scalar(_task_for_job_statement(), {"source": source, "job_id": job_id})

    def task_id_for_job(self, session: Session, source: str, job_id: str) -> int | None:
        return session.scalar(_task_id_for_job_statement(), {"source": source, "job_id": job_id})

    def record_and_find(
        self, session: Session, source: str, message_id: str, message_type: str, job_id: str, now: datetime
    ) -> Found:
        """The event's record and its task: a new message's task row-locked; a duplicate's id."""
        if not self.record(session, source, message_id, message_type, now):
            return Found(False, None, self.task_id_for_job(session, source, job_id))
        task = self.task_for_job(session, source, job_id)
        return Found(True, task, None if task is None else task.id)

    def task_or_orphan(
        self, session: Session, source: str, message_id: str, job_id: str, payload: Any, now: datetime
    ) -> ExternalTask | None:
        """Under the job's lock: the task again, and the event kept as an open orphan when it
        still finds none."""
        task = self.task_for_job(session, source, job_id)
        if task is None:
            orphan = OrphanEvent(
                source=source, message_id=message_id, vendor_job_id=job_id, payload=payload, received_at=now
            )
            session.add(orphan)
            session.flush()
        return task


class SqliteInbox(Inbox):
    """One statement each (SQLite has no INSERT inside a ``WITH``)."""


class PostgresInbox(Inbox):
    def record_and_find(
        self, session: Session, source: str, message_id: str, message_type: str, job_id: str, now: datetime
    ) -> Found:
        """The inbox row in a data-modifying ``WITH``, the task row-locked in another, joined to one
        row whichever is missing. A duplicate's task is locked too, for the moment its note takes:
        the inbox insert already waited for the first one's commit."""
        params = {
            "source": source,
            "message_id": message_id,
            "message_type": message_type,
            "processed_at": now,
            "job_id": job_id,
        }
        *task_columns, inbox_id = execute(session, _record_and_find_statement(), params).one()
        task = _FOUND_TASK.one(session, task_columns)
        return Found(inbox_id is not None, task, None if task is None else task.id)

    def task_or_orphan(
        self, session: Session, source: str, message_id: str, job_id: str, payload: Any, now: datetime
    ) -> ExternalTask | None:
        """One statement (a data-modifying ``WITH``): an orphan in 3 statements, not 4."""
        params = {
            "source": source,
            "job_id": job_id,
            "message_id": message_id,
            "payload": payload,
            "received_at": now,
        }
        found = execute(session, _task_or_orphan_statement(), params).one()
        return _FOUND_TASK.one(session, found)


_RECORD_MESSAGE = upsert(
    "INSERT INTO processed_messages (source, message_id, message_type, processed_at)"
    " VALUES (:source, :message_id, :message_type, :processed_at)"
    " ON CONFLICT (source, message_id) DO NOTHING RETURNING id",
    processed_at=ProcessedMessage.processed_at.type,
)


@built_once
def _task_for_job_statement() -> Select[tuple[ExternalTask]]:
    return (
        select(ExternalTask)
        .options(*WITHOUT_PAYLOAD)
        .where(ExternalTask.provider == bindparam("source"), ExternalTask.vendor_job_id == bindparam("job_id"))
        .with_for_update(key_share=True)
    )


@built_once
def _task_id_for_job_statement() -> Select[tuple[int]]:
    return select(ExternalTask.id).where(
        ExternalTask.provider == bindparam("source"), ExternalTask.vendor_job_id == bindparam("job_id")
    )


#: the task as a look for a job loads it, without the payloads: a Core row made the session's object
#: (``models.store.loaded``: the ORM's loading of an entity cost more calls than the statement's execution)
_FOUND_TASK = TASK_WITHOUT_PAYLOAD
#: the columns the task is loaded with
_FOUND_COLUMNS = _FOUND_TASK.columns
#: the task of a job as a WITH's ``task``, and its columns as the outer SELECT lists them
_TASK_CTE = (
    f"task AS (SELECT {', '.join(c.name for c in _FOUND_COLUMNS)} FROM external_tasks"
    " WHERE provider = :source AND vendor_job_id = :job_id FOR NO KEY UPDATE)"
)
_TASK_SELECTED = ", ".join("task." + c.name for c in _FOUND_COLUMNS)


@built_once
def _record_and_find_statement() -> Any:
    found = upsert(
        "WITH inbox AS (INSERT INTO processed_messages (source, message_id, message_type, processed_at)"
        " VALUES (:source, :message_id, :message_type, :processed_at)"
        f" ON CONFLICT (source, message_id) DO NOTHING RETURNING id), {_TASK_CTE}"
        f" SELECT {_TASK_SELECTED}, inbox.id AS inbox_id"
        " FROM (SELECT 1) AS one LEFT JOIN inbox ON true LEFT JOIN task ON true",
        processed_at=ProcessedMessage.processed_at.type,
    ).columns(*_FOUND_COLUMNS, column("inbox_id", BigInteger))
    return found


@built_once
def _task_or_orphan_statement() -> Any:
    found = upsert(
        f"WITH {_TASK_CTE},"
        " orphan AS (INSERT INTO orphan_events (source, message_id, vendor_job_id, payload, received_at, state)"
        " SELECT :source, :message_id, :job_id, :payload, :received_at, 'open'"
        " WHERE NOT EXISTS (SELECT 1 FROM task) RETURNING id)"
        f" SELECT {_TASK_SELECTED} FROM (SELECT 1) AS one LEFT JOIN task ON true",
        payload=OrphanEvent.payload.type,
        received_at=OrphanEvent.received_at.type,
    ).columns(*_FOUND_COLUMNS)
    return found
