"""Credentials in the store (``models.store.credentials``), on SQLite and on PostgreSQL: clients and
their API keys, the console's sessions and the ``token-url`` scheme's callback tokens, each looked up
by its digest.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError

from models.callback_tokens import CallbackToken
from models.client import ApiKey
from models.console_sessions import ConsoleSession
from models.db import Database
from models.store import store_of
from models.store.credentials import Credentials
from tests.middle.builders import NOW, add_client, add_task, uid

HOUR = timedelta(hours=1)


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _client(db: Database, channel: str | None = None) -> tuple[int, str]:
    with db.transaction() as session:
        client = add_client(session, channel=channel)
        return client.id, client.name


def test_both_stores_share_the_one_class(db: Database) -> None:
    with db.transaction() as session:
        assert type(store_of(session).credentials) is Credentials


def test_clients_are_found_by_name_and_listed_by_name(db: Database) -> None:
    b_id, b_name = _client(db)
    _, a_name = _client(db)
    with db.transaction() as session:
        credentials = store_of(session).credentials
        found = credentials.client_named(session, b_name)
        assert found is not None and found.id == b_id
        assert credentials.client_named(session, "nobody") is None
        assert credentials.name_taken(session, a_name) and not credentials.name_taken(session, "nobody")
        names = [c.name for c in credentials.clients(session)]
        assert names == sorted(names) and {a_name, b_name} <= set(names)


def test_a_client_found_to_change_is_locked(db: Database) -> None:
    """PostgreSQL: ``lock`` holds the client's row until the transaction ends (SQLite's ``BEGIN
    IMMEDIATE`` holds every write already)."""
    client_id, name = _client(db)
    with db.transaction() as session:
        assert store_of(session).credentials.client_named(session, name, lock=True) is not None
        if db.is_sqlite:
            return
        with db.engine.connect() as other:
            with pytest.raises(OperationalError):
                other.execute(text("SELECT id FROM clients WHERE id = :id FOR UPDATE NOWAIT"), {"id": client_id})
            other.rollback()


def test_a_key_authenticates_while_it_is_live_and_keys_come_newest_first(db: Database) -> None:
    client_id, _ = _client(db)
    hashes = {state: uid() for state in ("live", "retired", "revoked", "newest")}
    with db.transaction() as session:
        session.add_all(
            [
                ApiKey(client_id=client_id, key_hash=hashes["live"], created_at=NOW),
                ApiKey(client_id=client_id, key_hash=hashes["retired"], created_at=NOW - HOUR, retired_at=NOW),
                ApiKey(client_id=client_id, key_hash=hashes["revoked"], created_at=NOW - 2 * HOUR, revoked_at=NOW),
                ApiKey(client_id=client_id, key_hash=hashes["newest"], created_at=NOW + HOUR),
            ]
        )
    with db.transaction() as session:
        credentials = store_of(session).credentials
        for state in ("live", "newest"):
            found = credentials.client_of_key(session, hashes[state])
            assert found is not None and found.id == client_id
        for state in ("retired", "revoked"):
            assert credentials.client_of_key(session, hashes[state]) is None
        assert credentials.client_of_key(session, "unknown") is None
        order = [k.key_hash for k in credentials.keys_of(session, client_id)]
        assert order == [hashes[s] for s in ("newest", "live", "retired", "revoked")]


def test_clients_on_a_channel_by_id(db: Database) -> None:
    first = _client(db, "amqp")
    second = _client(db, "amqp")
    redis = _client(db, "redis")
    with db.transaction() as session:
        on_amqp = store_of(session).credentials.clients_on_channel(session, "amqp")
    assert [c for c in on_amqp if c in (first, second, redis)] == [first, second]


def test_console_sessions_open_expire_and_end(db: Database) -> None:
    operator, other = f"op-{uid()}", f"op-{uid()}"
    with db.transaction() as session:
        credentials = store_of(session).credentials
        credentials.open_console_session(session, "a" * 64, operator, NOW - 2 * HOUR, NOW - HOUR)  # expired by NOW
    with db.transaction() as session:
        assert credentials.console_operator(session, "a" * 64, NOW - 2 * HOUR) == operator
        assert credentials.console_operator(session, "a" * 64, NOW) is None  # expired: refused at once
        credentials.open_console_session(session, "b" * 64, operator, NOW, NOW + HOUR)
        credentials.open_console_session(session, "c" * 64, operator, NOW, NOW + HOUR)
        credentials.open_console_session(session, "d" * 64, other, NOW, NOW + HOUR)
    with db.transaction() as session:
        # the expired one went at the next sign-in
        assert session.scalar(select(func.count()).where(ConsoleSession.id_hash == "a" * 64)) == 0
        assert credentials.console_operator(session, "b" * 64, NOW) == operator
        credentials.end_console_session(session, "b" * 64)
        assert credentials.console_operator(session, "b" * 64, NOW) is None
        assert credentials.end_console_sessions_of(session, operator) == 1  # "c"
        assert credentials.console_operator(session, "d" * 64, NOW) == other
        assert credentials.end_console_sessions_of(session, other) == 1


def test_a_token_finds_its_task_only_for_its_provider(db: Database) -> None:
    client_id, _ = _client(db)
    digest = uid()
    with db.transaction() as session:
        task = add_task(session, client_id, state="submitted", vendor_job_id="job-1")
        session.add(CallbackToken(digest=digest, task_id=task.id, created_at=NOW))
    with db.transaction() as session:
        credentials = store_of(session).credentials
        assert credentials.token_task(session, "sim", digest) == ("submitted", "job-1")
        assert credentials.token_task(session, "other", digest) is None
        assert credentials.token_task(session, "sim", "unknown") is None
