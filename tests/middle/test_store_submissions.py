"""The store's ``submissions`` family (``models/store/submissions.py``), one contract on both databases:
a client's task found by its correlation id, and what an earlier request made. PostgreSQL is the
machine's (a fresh database for this module, ``tests/integration/services.py``); where it is absent
its half skips (and fails under CI, which must start it).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from models.client import Client
from models.db import Database
from models.task import ExternalTask
from tests.middle.builders import add_client, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _task(session: Session, client: Client, correlation_id: str, **columns: Any) -> ExternalTask:
    return add_task(session, client, correlation_id=correlation_id, **columns)


def test_find_names_the_client(db: Database):
    with db.transaction() as session:
        mine, theirs = add_client(session), add_client(session)
        task = _task(session, mine, "order-1")
        _task(session, theirs, "order-1")  # another tenant's task of the same name
        submissions = db.store.submissions
        found = submissions.find(session, mine.id, "order-1")
        assert found is not None and found.id == task.id
        assert submissions.find(session, mine.id, "order-2") is None
        assert submissions.find(session, add_client(session).id, "order-1") is None


def test_earlier_finds_a_request_by_its_key_or_its_correlation_id(db: Database):
    with db.transaction() as session:
        client, other = add_client(session), add_client(session)
        by_key = _task(session, client, "a", idempotency_key="k-1")
        by_name = _task(session, client, "b")
        _task(session, other, "b", idempotency_key="k-1")  # another client's: never found
        submissions = db.store.submissions
        assert [t.id for t in submissions.earlier(session, client.id, "z", "k-1")] == [by_key.id]
        assert [t.id for t in submissions.earlier(session, client.id, "b", None)] == [by_name.id]
        both = submissions.earlier(session, client.id, "b", "k-1")
        assert sorted(t.id for t in both) == sorted([by_key.id, by_name.id])
        assert list(submissions.earlier(session, client.id, "z", None)) == []
        assert list(submissions.earlier(session, client.id, "a", "k-2")) == [by_key]  # the name alone
