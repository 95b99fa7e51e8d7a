"""Retention: finished work is deleted once it has been quiet for its kind's retention (beat, hourly),
touching only due rows, on an index, in small batches, each batch one short transaction.

The kinds, and what "finished" means for each (nothing open is ever removed):

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

Two runs at once (two beats, or beat and ``liaison prune``) are harmless: on PostgreSQL each batch
locks its rows ``FOR UPDATE SKIP LOCKED``, so the runs take disjoint batches and a task a worker
holds is skipped, not waited for; on SQLite every transaction is ``BEGIN IMMEDIATE`` (models.db), so
batches run one after the other and the second finds the first's rows gone.

Export (``LIAISON_RETENTION_EXPORT_DIR``): each batch's rows are appended as JSON lines to
``<dir>/<kind>-<YYYY-MM-DD>.jsonl`` and fsynced *before* the batch's delete commits. A failed write
raises, the transaction rolls back, nothing is deleted, and the run stops there (the job logs and
the next run tries again). A commit that fails after the write leaves rows exported but not deleted:
they are exported again by the next run (at least once, never lost).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Column, ColumnElement, Select, Table, delete, exists, or_, select, text
from sqlalchemy.orm import Session, aliased

from core.states import TERMINAL
from foundation.settings import Settings
from models.attention import Incident, OrphanEvent
from models.base import Base
from models.db import Database
from models.messages import DeadLetter, OutboxMessage, ProcessedMessage
from models.notifications import PENDING, Notification
from models.task import FINISHED, ExternalTask

log = logging.getLogger(__name__)

PRUNE_BATCH = 1000
DAY_S = 86400
DEFAULT_RETENTION_S = 30 * DAY_S

#: every kind, in the order a run handles them: tasks first (they take their own outbox rows along)
KINDS = ("tasks", "outbox", "dead_letters", "incidents", "notifications", "orphans", "processed_messages")
FINAL_STATES = sorted(state.value for state in TERMINAL)


class ExportFailed(Exception):
    """Writing the export failed: the batch was not deleted."""


@dataclass(frozen=True)
class Retention:
    """How long each kind is kept after it finished (seconds), and where removed rows are exported."""

    tasks_s: int = DEFAULT_RETENTION_S
    outbox_s: int = DEFAULT_RETENTION_S
    dead_letters_s: int = DEFAULT_RETENTION_S
    incidents_s: int = DEFAULT_RETENTION_S
    orphans_s: int = DEFAULT_RETENTION_S
    processed_messages_s: int = 4 * DAY_S
    export_dir: Path | None = None
    batch: int = PRUNE_BATCH

    @classmethod
    def from_settings(cls, settings: Settings) -> Retention:
        return cls(
            tasks_s=settings.retention_tasks_s,
            outbox_s=settings.retention_outbox_s,
            dead_letters_s=settings.retention_dead_letters_s,
            incidents_s=settings.retention_incidents_s,
            orphans_s=settings.retention_orphans_s,
            processed_messages_s=settings.processed_retention_s,
            export_dir=Path(settings.retention_export_dir) if settings.retention_export_dir else None,
        )

    def seconds(self, kind: str) -> int:
        if kind == "notifications":
            return self.incidents_s  # a notice is kept as long as the incident it told of
        value: int = getattr(self, f"{kind}_s")
        return value


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


_TABLES: Mapping[str, Table] = {
    "outbox": OutboxMessage.__table__,  # type: ignore[dict-item]
    "dead_letters": DeadLetter.__table__,  # type: ignore[dict-item]
    "incidents": Incident.__table__,  # type: ignore[dict-item]
    "notifications": Notification.__table__,  # type: ignore[dict-item]
    "orphans": OrphanEvent.__table__,  # type: ignore[dict-item]
    "processed_messages": ProcessedMessage.__table__,  # type: ignore[dict-item]
}


def _remove(session: Session, kind: str, ids: Sequence[int]) -> None:
    if kind != "tasks":
        table = _TABLES[kind]
        session.execute(delete(table).where(table.c.id.in_(ids)))
        return
    for column in task_dependents():
        session.execute(delete(column.table).where(column.in_(ids)))
    session.execute(delete(ExternalTask).where(ExternalTask.id.in_(ids)))


# --- export ---------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot export a {type(value).__name__}")


def _rows(session: Session, table: Any, column: Any, ids: Sequence[int]) -> list[dict[str, Any]]:
    return [dict(row) for row in session.execute(select(table).where(column.in_(ids))).mappings()]


def export_lines(session: Session, kind: str, ids: Sequence[int]) -> list[str]:
    """One JSON line per removed row; a task's line carries every row that belongs to it, by table."""
    if kind != "tasks":
        table = _TABLES[kind]
        return [json.dumps({"kind": kind, "row": r}, default=_jsonable) for r in _rows(session, table, table.c.id, ids)]
    tasks = _rows(session, ExternalTask.__table__, ExternalTask.__table__.c.id, ids)
    owned: dict[int, dict[str, list[dict[str, Any]]]] = {t["id"]: {} for t in tasks}
    for column in task_dependents():
        for row in _rows(session, column.table, column, ids):
            owned[row[column.key]].setdefault(column.table.name, []).append(row)
    return [json.dumps({"kind": kind, "row": t, "belongs": owned[t["id"]]}, default=_jsonable) for t in tasks]


def append_export(directory: Path, kind: str, day: date, lines: Iterable[str]) -> None:
    """Append the lines to the kind's file for the day, under an exclusive lock (two beats may
    export at once), and fsync. A failed or short write is cut back off, so the file holds only
    whole lines; either way ExportFailed is raised and the caller's transaction rolls back."""
    data = "".join(line + "\n" for line in lines).encode()
    path = directory / f"{kind}-{day.isoformat()}.jsonl"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ExportFailed(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, start)
            raise ExportFailed(f"cannot write {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


# --- the run ----------------------------------------------------------------------------------------


def prune_kind(
    db: Database,
    kind: str,
    now: datetime,
    retention_s: int,
    *,
    batch: int = PRUNE_BATCH,
    export_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Remove every due row of one kind, a batch per transaction, until a batch comes back short."""
    cutoff = now - timedelta(seconds=retention_s)
    removed = 0
    while True:
        with db.transaction() as session:
            ids = session.scalars(due_query(kind, cutoff, batch)).all()
            if ids:
                if export_dir is not None:
                    append_export(export_dir, kind, now.date(), export_lines(session, kind, ids))
                _remove(session, kind, ids)
        removed += len(ids)
        if progress is not None and ids:
            progress(removed)
        if len(ids) < batch:
            return removed


def prune(
    db: Database,
    now: datetime,
    retention: Retention,
    kinds: Iterable[str] = KINDS,
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Every kind's due rows; how many of each were removed."""
    removed: dict[str, int] = {}
    for kind in kinds:
        report = None if progress is None else (lambda n, k=kind: progress(k, n))
        removed[kind] = prune_kind(
            db,
            kind,
            now,
            retention.seconds(kind),
            batch=retention.batch,
            export_dir=retention.export_dir,
            progress=report,
        )
    return removed


def prune_processed_messages(
    db: Database,
    now: datetime,
    retention_s: int,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """The inbox alone (what ``liaison.prune_processed_messages`` did before the other kinds)."""
    return prune_kind(db, "processed_messages", now, retention_s, batch=batch, progress=progress)
