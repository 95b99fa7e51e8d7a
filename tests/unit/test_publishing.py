"""The one publish path (``models.publishing``): outbox rows reach the publisher after commit, from
the session hook alone; nothing after a rollback. In-process SQLite, a stub publisher."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Base, publishing
from models.base import utcnow
from models.client import Client
from models.db import Database
from models.messages import DeadLetter, OutboxKind, OutboxMessage
from service.credentials import create_client
from service.dead_letters import dead_letter, replay
from service.intake import SubmitRequest, submit_task


class StubPublisher:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def publish(self, rows: list[OutboxMessage]) -> int:
        self.batches.append([row.id for row in rows])
        return len(rows)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Database, StubPublisher]]:
    database = Database(f"sqlite:///{tmp_path / 'publishing.db'}")
    Base.metadata.create_all(database.engine)
    stub = StubPublisher()
    publishing.install(database.sessionmaker, stub.publish)
    yield database, stub
    database.dispose()


def _request(correlation_id: str) -> SubmitRequest:
    return SubmitRequest(
        input={"n": 1},
        correlation_id=correlation_id,
        provider="sim",
        callback_url=None,
        acceptance_deadline=None,
        execution_deadline=None,
        on_deadline="escalate",
        fingerprint="f",
    )


def _submit(session: Session, client: Client, correlation_id: str) -> OutboxMessage:
    return submit_task(session, client, _request(correlation_id), None, utcnow()).outbox[0]


def test_a_new_row_is_published_once_after_commit_not_before(db: tuple[Database, StubPublisher]) -> None:
    database, stub = db
    with database.transaction() as session:
        client, _, _ = create_client(session, "shop", None)
        row = _submit(session, client, "a")
        session.flush()
        assert stub.batches == []  # flushed, not committed: nothing sent yet
    assert stub.batches == [[row.id]]


def test_nothing_is_published_after_a_rollback(db: tuple[Database, StubPublisher]) -> None:
    database, stub = db
    with database.transaction() as session:
        client, _, _ = create_client(session, "shop", None)
    stub.batches.clear()
    with pytest.raises(RuntimeError), database.transaction() as session:
        _submit(session, session.merge(client), "b")
        raise RuntimeError("the request failed after the outbox row was flushed")
    with database.transaction() as session:  # a later transaction of the same kind of session
        session.add(DeadLetter(kind="submit", message_id="m", payload={}, error="e", fault="system"))
    assert stub.batches == []


def test_a_row_added_in_a_savepoint_that_rolled_back_is_left_out(db: tuple[Database, StubPublisher]) -> None:
    database, stub = db
    with database.transaction() as session:
        client, _, _ = create_client(session, "shop", None)
        kept = _submit(session, client, "kept")
        with pytest.raises(RuntimeError), session.begin_nested():
            _submit(session, client, "undone")
            raise RuntimeError("this row's work failed")
    assert stub.batches == [[kept.id]]


def test_a_released_savepoint_publishes_nothing_until_the_outer_commit(db: tuple[Database, StubPublisher]) -> None:
    """Publishing while the outer transaction still holds its locks would wait on them (SQLite)."""
    database, stub = db
    with database.transaction() as session:
        client, _, _ = create_client(session, "shop", None)
        with session.begin_nested():
            row = _submit(session, client, "inner")
        assert stub.batches == []
    assert stub.batches == [[row.id]]


def test_a_replayed_dead_letter_is_published_again_by_the_hook(db: tuple[Database, StubPublisher]) -> None:
    database, stub = db
    with database.transaction() as session:
        client, _, _ = create_client(session, "shop", None)
        row = _submit(session, client, "c")
    with database.transaction() as session:
        submitted = session.get(OutboxMessage, row.id)
        assert submitted is not None
        dead_letter(session, submitted, "refused", "caller", utcnow())
    stub.batches.clear()
    with database.transaction() as session:
        letter = session.scalar(select(DeadLetter).where(DeadLetter.outbox_id == row.id))
        assert letter is not None
        replay(session, letter, utcnow())
    assert stub.batches == [[row.id]]
    with database.transaction() as session:
        replayed = session.get(OutboxMessage, row.id)
        assert replayed is not None
        assert replayed.kind == OutboxKind.SUBMIT


def test_the_publisher_sees_its_own_stamping_transaction_publish_nothing(db: tuple[Database, StubPublisher]) -> None:
    """Sessions without outbox rows publish nothing: no empty batches, no recursion."""
    database, stub = db
    with database.transaction() as session:
        create_client(session, "shop", None)
    assert stub.batches == []
