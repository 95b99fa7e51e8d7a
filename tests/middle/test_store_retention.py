"""Retention in the store (``models.store.retention``), on SQLite and on PostgreSQL: what each kind
finds due (only what finished before the cutoff, oldest first, a batch at a time; nothing open), the
rows a batch exports, and the deletes (a task with every row that belongs to it).

Each test dates its rows in a year of its own, so the module's shared database keeps them apart.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from models import notifications
from models.attention import Incident, OrphanEvent
from models.base import Base
from models.callback_tokens import CallbackToken
from models.db import Database
from models.messages import DeadLetter, OutboxMessage, ProcessedMessage
from models.notifications import Notification
from models.store import store_of
from models.store.retention import NOTICE_PENDING, Pruning, task_dependents
from models.task import ExternalTask, TaskEvent
from tests.middle.builders import add_outbox_row, add_task, uid

DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


# one row of each simple kind: finished at ``at`` (``done``), or still open
def _processed(at: datetime, done: bool) -> ProcessedMessage:
    """A dedup record is never open: the one kept is one seen later (within its retention)."""
    seen = at if done else at + 365 * DAY
    return ProcessedMessage(source="test", message_id=uid(), message_type="t", processed_at=seen)


def _letter(at: datetime, done: bool) -> DeadLetter:
    return DeadLetter(
        kind="relay", message_id=uid(), error="e", fault="system", state="replayed" if done else "open", closed_at=at
    )


def _incident(at: datetime, done: bool) -> Incident:
    return Incident(kind="k", subject="s", detail="d", opened_at=at, resolved_at=at if done else None)


def _notice(at: datetime, done: bool) -> Notification:
    state = "sent" if done else NOTICE_PENDING
    return Notification(
        key=uid(), kind="k", subject="s", phase="opened", detail="d", occurred_at=at, state=state, dispatched_at=at
    )


def _orphan(at: datetime, done: bool) -> OrphanEvent:
    return OrphanEvent(
        source="sim",
        message_id=uid(),
        vendor_job_id=uid(),
        payload={},
        state="resolved" if done else "open",
        resolved_at=at,
    )


SIMPLE: dict[str, Callable[[datetime, bool], Any]] = {
    "processed_messages": _processed,
    "dead_letters": _letter,
    "incidents": _incident,
    "notifications": _notice,
    "orphans": _orphan,
}
YEARS = {kind: 2001 + i for i, kind in enumerate(SIMPLE)}


def test_both_stores_share_the_one_class(db: Database) -> None:
    with db.transaction() as session:
        assert type(store_of(session).retention) is Pruning
    assert NOTICE_PENDING == notifications.PENDING


@pytest.mark.parametrize("kind", list(SIMPLE))
def test_a_kind_finds_what_finished_before_the_cutoff_oldest_first_in_batches(db: Database, kind: str) -> None:
    start = datetime(YEARS[kind], 1, 1, tzinfo=UTC)
    make = SIMPLE[kind]
    with db.transaction() as session:
        rows = [make(start + 2 * DAY, True), make(start, True), make(start, False), make(start + 10 * DAY, True)]
        session.add_all(rows)
        session.flush()
        second, first, still_open, recent = (row.id for row in rows)
    cutoff = start + 5 * DAY
    pruning = store_of_db(db)
    with db.transaction() as session:
        due = pruning.due(session, kind, cutoff, 1000)
        mine = [i for i in due if i in {first, second, still_open, recent}]
        assert mine == [first, second]  # oldest first; neither the open one nor the recent one
        exported = pruning.rows(session, kind, [first, second])
        assert {row["id"] for row in exported} == {first, second}
    with db.transaction() as session:
        assert pruning.due(session, kind, datetime(YEARS[kind], 1, 1, 12, tzinfo=UTC), 1) == [first]
        pruning.remove(session, kind, [first, second])
    table = Base.metadata.tables[type(rows[0]).__tablename__]
    with db.transaction() as session:
        left = set(session.scalars(select(table.c.id).where(table.c.id.in_([first, second, still_open, recent]))))
    assert left == {still_open, recent}


def store_of_db(db: Database) -> Pruning:
    with db.transaction() as session:
        return store_of(session).retention


def _task(session: Session, state: str, updated_at: datetime) -> ExternalTask:
    return add_task(session, state=state, updated_at=updated_at)


def _outbox(session: Session, task: ExternalTask, done_at: datetime | None, sequence: int) -> OutboxMessage:
    completed = {"type": "task.completed"}
    return add_outbox_row(
        session, task, payload=completed, sequence=sequence, created_at=done_at or task.updated_at, done_at=done_at
    )


def test_a_task_goes_once_finished_and_settled_with_every_row_of_its(db: Database) -> None:
    old = datetime(2010, 1, 1, tzinfo=UTC)
    with db.transaction() as session:
        settled = _task(session, "succeeded", old)
        settled_row = _outbox(session, settled, old, 1)
        session.add(TaskEvent(task_id=settled.id, at=old, kind="state.succeeded", detail={}))
        session.add(CallbackToken(digest=uid(), task_id=settled.id, created_at=old))
        undelivered = _task(session, "succeeded", old)  # a callback not yet done: kept
        _outbox(session, undelivered, None, 1)
        lettered = _task(session, "failed", old)  # a done row with an open dead letter: kept
        lettered_row = _outbox(session, lettered, old, 1)
        session.add(DeadLetter(kind="relay", message_id=uid(), outbox_id=lettered_row.id, error="e", fault="system"))
        running = _task(session, "accepted", old)  # open: kept, and so are its done rows
        running_row = _outbox(session, running, old, 1)
        ids = {t.id for t in (settled, undelivered, lettered, running)}
        rows = {settled_row.id, lettered_row.id, running_row.id}
    pruning = store_of_db(db)
    cutoff = old + DAY
    with db.transaction() as session:
        assert [i for i in pruning.due(session, "tasks", cutoff, 1000) if i in ids] == [settled.id]
        # the outbox kind keeps a row an open letter names and the rows of a task that may change
        assert [i for i in pruning.due(session, "outbox", cutoff, 1000) if i in rows] == [settled_row.id]
        [(task, belongs)] = pruning.tasks_with_rows(session, [settled.id])
        assert task["id"] == settled.id and task["state"] == "succeeded"
        assert [row["id"] for row in belongs["outbox_messages"]] == [settled_row.id]
        assert [row["kind"] for row in belongs["task_events"]] == ["state.succeeded"]
        assert len(belongs["callback_tokens"]) == 1
        pruning.remove(session, "tasks", [settled.id])
    with db.transaction() as session:
        for column in task_dependents():
            assert session.scalar(select(func.count()).where(column == settled.id)) == 0, column
        assert session.scalar(select(func.count()).where(ExternalTask.id.in_(ids))) == 3
        assert session.scalar(select(func.count()).where(OutboxMessage.id.in_(rows))) == 2


def test_an_unknown_kind_is_refused(db: Database) -> None:
    with db.transaction() as session, pytest.raises(ValueError, match="unknown retention kind"):
        store_of(session).retention.due(session, "everything", datetime(2020, 1, 1, tzinfo=UTC), 10)


def test_a_row_another_transaction_holds_is_skipped_not_waited_for(db: Database) -> None:
    """PostgreSQL: two runs at once take disjoint batches. SQLite serialises the runs instead."""
    if db.is_sqlite:
        pytest.skip("SQLite: BEGIN IMMEDIATE runs one batch after the other")
    start = datetime(2020, 1, 1, tzinfo=UTC)
    with db.transaction() as session:
        rows = [_processed(start, True), _processed(start + DAY, True)]
        session.add_all(rows)
        session.flush()
        held, free = (row.id for row in rows)
    with db.engine.connect() as other:
        other.execute(text("SELECT id FROM processed_messages WHERE id = :id FOR UPDATE"), {"id": held})
        with db.transaction() as session:
            due = store_of(session).retention.due(session, "processed_messages", start + 2 * DAY, 1000)
        other.rollback()
    assert free in due and held not in due
