"""Beat's heartbeat in the store (``models.store.heartbeats``) and the readiness probe's statement
(``Reads.answer``), one contract on both databases (``tests/middle/conftest.py``'s ``both_databases``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

from core.beat_liveness import liveness
from models.db import Database
from models.heartbeats import BeatHeartbeat
from models.store.heartbeats import beat_liveness, record_tick
from tests.middle.builders import NOW


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def test_no_tick_yet_reads_as_never_ticked(db: Database) -> None:
    with db.transaction() as session:
        assert beat_liveness(session, NOW) == liveness(None, None, NOW)


def test_two_beats_write_one_row_and_the_last_tick_is_read_through_a_session_or_a_connection(
    db: Database,
) -> None:
    record_tick(db, NOW, 10.0, "host-a:1")
    record_tick(db, NOW + timedelta(seconds=5), 30.0, "host-b:2")
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(BeatHeartbeat)) == 1
        read = beat_liveness(session, NOW + timedelta(seconds=6))
        assert read == liveness(NOW + timedelta(seconds=5), 30.0, NOW + timedelta(seconds=6))
    with db.engine.connect() as conn:
        assert beat_liveness(conn, NOW + timedelta(seconds=6)) == read


def test_the_probe_sends_one_statement_that_reads_nothing(db: Database) -> None:
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        with db.engine.connect() as conn:
            db.store.reads.answer(conn)  # raises if the database does not answer
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    assert [s for s in sent if not s.startswith("BEGIN")] == ["SELECT 1"]  # SQLite: after its BEGIN IMMEDIATE
