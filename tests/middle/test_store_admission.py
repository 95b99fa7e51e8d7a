"""The submit's admission in the store (``models.store.admission``), on SQLite and on PostgreSQL: the
client's load counted (its window, its queue, its open tasks) and the client's lock, which
PostgreSQL takes (the row, then the dispatch lock when asked) and SQLite need not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from models.db import Database
from models.store import store_of
from models.store.admission import PostgresAdmission, SqliteAdmission
from tests.middle.builders import NOW, add_client, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _client(db: Database) -> int:
    with db.transaction() as session:
        return add_client(session).id


def _tasks(db: Database, client_id: int, *shapes: dict[str, Any]) -> None:
    with db.transaction() as session:
        for shape in shapes:
            add_task(session, client_id, **{"state": "requested", **shape})


def test_each_database_has_its_class(db: Database) -> None:
    with db.transaction() as session:
        admission = store_of(session).admission
    assert isinstance(admission, SqliteAdmission if db.is_sqlite else PostgresAdmission)


def test_the_load_counts_the_window_the_queue_and_the_open_tasks(db: Database) -> None:
    client_id = _client(db)
    other = _client(db)
    _tasks(
        db,
        client_id,
        {"dispatched_at": NOW},  # on its way
        {"dispatched_at": NOW},  # on its way
        {},  # waiting in the queue
        {"state": "submitted", "dispatched_at": NOW},  # open at the vendor: open, not on its way
        {"state": "succeeded", "dispatched_at": NOW},  # finished: counted nowhere
        {"provider": "other", "dispatched_at": NOW},  # another provider's: open, not this window's
    )
    _tasks(db, other, {"dispatched_at": NOW}, {})
    empty = _client(db)
    with db.transaction() as session:
        admission = store_of(session).admission
        assert admission.queue_load(session, "sim", client_id) == (2, 1)
        assert admission.count_open(session, client_id) == 5
        assert admission.load(session, "sim", client_id) == (2, 1, 5)
        # a client with nothing: zeros, never None
        assert admission.queue_load(session, "sim", empty) == (0, 0)
        assert admission.count_open(session, empty) == 0
        assert admission.load(session, "sim", empty) == (0, 0, 0)


@contextmanager
def _statements(db: Database) -> Iterator[list[str]]:
    sent: list[str] = []

    def note(*args: Any) -> None:
        sent.append(args[2])

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(db.engine, "before_cursor_execute", note)


@pytest.mark.parametrize("release_key", [None, 4242])
def test_the_client_lock_holds_the_row_and_then_the_dispatch_lock(db: Database, release_key: int | None) -> None:
    """PostgreSQL: the client's row is locked against another submit's lock (and the dispatch lock is
    held when its key is given) until the transaction ends, in one statement. SQLite: no statement."""
    client_id = _client(db)
    with db.transaction() as session:
        with _statements(db) as taken:
            store_of(session).admission.lock_client(session, client_id, release_key)
        if db.is_sqlite:
            assert taken == []
            return
        assert len(taken) == 1
        with db.engine.connect() as other:
            with pytest.raises(OperationalError):
                other.execute(text("SELECT id FROM clients WHERE id = :id FOR NO KEY UPDATE NOWAIT"), {"id": client_id})
            other.rollback()
            # a task insert takes KEY SHARE on its client: it does not wait on the row lock
            assert other.execute(text("SELECT id FROM clients WHERE id = :id FOR KEY SHARE NOWAIT"), {"id": client_id})
            other.rollback()
            free = other.execute(text("SELECT pg_try_advisory_xact_lock(4242)")).scalar_one()
            assert free is (release_key is None)
            other.rollback()
    with db.engine.connect() as other:  # released with the transaction
        assert other.execute(text("SELECT pg_try_advisory_xact_lock(4242)")).scalar_one() is True
        other.execute(text("SELECT id FROM clients WHERE id = :id FOR NO KEY UPDATE NOWAIT"), {"id": client_id})
        other.rollback()
