"""The claims family (``models.store.claims``) and the rows its hot claims make objects of by hand
(``models.store.loaded``), on both databases: each claim answers what the ORM's own load answered —
the same columns, the same object of the session, persistent and clean, the unread payloads
deferred and loaded alone on first access, a row re-read under its lock overwriting what the
session held."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import inspect, select, update
from sqlalchemy.orm import Session

from models.attention import CallbackEndpoint
from models.client import Client
from models.db import Database
from models.messages import OutboxMessage
from models.store import store_of
from models.store.loaded import OUTBOX_ROW, TASK_WITHOUT_INPUT
from models.task import ExternalTask
from service.claims import job_lock_key
from service.ordering import held_by
from tests.middle.builders import NOW, add_client, add_outbox_row, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _task_and_row(db: Database, *, done: bool = False, **task_columns: Any) -> tuple[int, int, int]:
    """A client, its task and a relay row of it, committed: (client id, task id, outbox id)."""
    with db.transaction() as session:
        client = add_client(session)
        task = add_task(
            session,
            client,
            input={"a": [1, 2]},
            outcome={"ok": True},
            callback_url="https://a.example/task-cb",
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            **task_columns,
        )
        accepted = {"type": "task.accepted"}
        row = add_outbox_row(session, task, payload=accepted, sequence=1, done_at=NOW if done else None)
        return client.id, task.id, row.id


def _columns(obj: Any) -> dict[str, Any]:
    return {attr.key: getattr(obj, attr.key) for attr in inspect(type(obj)).column_attrs}


def _as_the_orm_loads(db: Database, cls: type[Any], pk: int) -> dict[str, Any]:
    with db.transaction() as session:
        obj = session.get(cls, pk)
        assert obj is not None
        return _columns(obj)


def _clean_and_held(session: Session, obj: Any) -> None:
    state = inspect(obj)
    assert state.persistent and not state.modified and obj in session
    assert session.identity_map.get(state.key) is obj


def test_a_claim_with_its_task_loads_what_the_orm_loads(db: Database) -> None:
    _, task_id, outbox_id = _task_and_row(db)
    expected_row = _as_the_orm_loads(db, OutboxMessage, outbox_id)
    expected_task = _as_the_orm_loads(db, ExternalTask, task_id)
    with db.transaction() as session:
        found = store_of(session).claims.claim_outbox_and_task(session, outbox_id, True, None, None)
        assert found is not None
        (row, task, raw), queued = found
        assert queued is None
        _clean_and_held(session, row)
        _clean_and_held(session, task)
        assert "input" not in inspect(task).dict and "outcome" in inspect(task).dict  # input deferred
        assert raw is not None and raw.replace(" ", "") == '{"a":[1,2]}'
        assert session.get(ExternalTask, task_id) is task  # the identity map's object
        assert _columns(row) == expected_row
        assert task.input == {"a": [1, 2]}  # loaded on first access
        assert _columns(task) == expected_task


def test_a_claimed_object_written_by_the_caller_is_flushed_as_before(db: Database) -> None:
    _, task_id, outbox_id = _task_and_row(db)
    with db.transaction() as session:
        found = store_of(session).claims.claim_outbox_and_task(session, outbox_id, False, None, None)
        assert found is not None
        (row, task, raw), _ = found
        assert raw is None
        row.attempts += 1
        task.state = "accepted"
    with db.transaction() as session:
        assert session.get(OutboxMessage, outbox_id).attempts == 1  # type: ignore[union-attr]
        again = session.get(ExternalTask, task_id)
        assert again is not None and again.state == "accepted" and again.input == {"a": [1, 2]}


def test_a_claim_on_the_job_lock_looks_for_queued_tasks_on_postgresql_only(db: Database) -> None:
    _, _, outbox_id = _task_and_row(db)
    with db.transaction() as session:
        store = store_of(session)
        found = store.claims.claim_outbox_and_task(session, outbox_id, False, job_lock_key("sim", "j1"), True)
        assert found is not None
        (row, task, _), queued = found
        assert row.id == outbox_id and task.id == row.task_id
        assert queued is None if store.locks.serialises_writers else isinstance(queued, bool)


def test_a_done_row_is_not_claimed(db: Database) -> None:
    _, _, outbox_id = _task_and_row(db, done=True)
    with db.transaction() as session:
        claims = store_of(session).claims
        assert claims.claim_outbox(session, outbox_id) is None
        assert claims.claim_outbox_and_task(session, outbox_id, True, None, None) is None
        assert claims.claim_relay(session, outbox_id, held_by) is None
        assert claims.claim_outbox(session, 10**12) is None
        assert claims.claim_relay(session, 10**12, held_by) is None


def test_a_relay_claim_reads_its_row_client_and_task(db: Database) -> None:
    client_id, task_id, outbox_id = _task_and_row(db)
    expected_row = _as_the_orm_loads(db, OutboxMessage, outbox_id)
    expected_client = _as_the_orm_loads(db, Client, client_id)
    with db.transaction() as session:
        found = store_of(session).claims.claim_relay(session, outbox_id, held_by)
        assert found is not None
        assert found.callback_url == "https://a.example/task-cb"
        assert found.traceparent is not None and found.traceparent.startswith("00-0af7")
        assert (found.held_by, found.any_disabled, found.any_unhealthy) == (None, False, False)
        assert found.client is not None and found.client.id == client_id
        _clean_and_held(session, found.row)
        _clean_and_held(session, found.client)
        assert _columns(found.row) == expected_row
        assert _columns(found.client) == expected_client
        assert store_of(session).claims.claim_relay(session, outbox_id, held_by).row is found.row  # type: ignore[union-attr]
        assert store_of(session).claims.client_of_task(session, task_id) == (found.client, found.traceparent)


def test_a_relay_of_a_task_gone_has_no_client(db: Database) -> None:
    _, _, outbox_id = _task_and_row(db)
    with db.transaction() as session:
        session.execute(update(OutboxMessage).where(OutboxMessage.id == outbox_id).values(task_id=10**12))
    with db.transaction() as session:
        found = store_of(session).claims.claim_relay(session, outbox_id, held_by)
        assert found is not None and found.client is None and found.callback_url is None
        assert store_of(session).claims.client_of_task(session, 10**12) == (None, None)


def test_a_claim_re_reads_what_the_session_held(db: Database) -> None:
    """``populate_existing``: the row and task re-read under their locks overwrite the session's copies."""
    _, task_id, outbox_id = _task_and_row(db)
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        task = session.get(ExternalTask, task_id)
        assert row is not None and task is not None
        changed = {"attempts": 7, "target": "https://elsewhere.example"}
        quietly = {"synchronize_session": False}  # the session's objects left as they were
        session.execute(
            update(OutboxMessage).where(OutboxMessage.id == outbox_id).values(**changed), execution_options=quietly
        )
        session.execute(
            update(ExternalTask).where(ExternalTask.id == task_id).values(state="accepted"), execution_options=quietly
        )
        assert row.attempts == 0 and task.state != "accepted"  # the session's stale copies
        found = store_of(session).claims.claim_relay(session, outbox_id, held_by)
        assert found is not None and found.row is row
        assert (row.attempts, row.target) == (7, "https://elsewhere.example")
        _clean_and_held(session, row)
        claimed = store_of(session).claims.claim_outbox_and_task(session, outbox_id, False, None, None)
        assert claimed is not None and claimed[0][1] is task and task.state == "accepted"
        _clean_and_held(session, task)
        assert store_of(session).claims.lock_task(session, task_id) is task


def test_the_loaders_select_every_column_but_the_deferred(db: Database) -> None:
    assert {c.key for c in OUTBOX_ROW.columns} == {c.key for c in OutboxMessage.__table__.columns}
    assert {c.key for c in TASK_WITHOUT_INPUT.columns} | {"input"} == {c.key for c in ExternalTask.__table__.columns}


def test_a_disabled_endpoint_is_found_by_its_hash(db: Database) -> None:
    client_id, _, _ = _task_and_row(db)
    _, _, other_id = _task_and_row(db)
    with db.transaction() as session:
        session.add(CallbackEndpoint(client_id=client_id, url_hash="h1", url="https://a.example/1", disabled_at=NOW))
        session.add(CallbackEndpoint(client_id=client_id, url_hash="h2", url="https://a.example/2"))
    with db.transaction() as session:
        claims = store_of(session).claims
        assert claims.disabled_endpoint(session, client_id, "h1")
        assert not claims.disabled_endpoint(session, client_id, "h2")
        assert not claims.disabled_endpoint(session, client_id, "h3")
        found = claims.claim_relay(session, other_id, held_by)
        assert found is not None and not found.any_disabled
        assert session.scalar(select(CallbackEndpoint.id).where(CallbackEndpoint.url_hash == "h1")) is not None


def test_finishing_a_row_returns_it_clean(db: Database) -> None:
    _, _, outbox_id = _task_and_row(db)
    with db.transaction() as session:
        held = session.get(OutboxMessage, outbox_id)
        row = store_of(session).outbox.claim_finished(session, outbox_id, NOW + timedelta(seconds=1))
        assert row is held and row is not None
        assert row.done_at == NOW + timedelta(seconds=1) and row.attempts == 1
        _clean_and_held(session, row)
        assert store_of(session).outbox.claim_finished(session, outbox_id, NOW) is None


def test_a_webhook_finds_its_task_as_the_orm_loads_it_without_its_payloads(db: Database) -> None:
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    _, task_id, _ = _task_and_row(db, vendor_job_id=job_id)
    expected = _as_the_orm_loads(db, ExternalTask, task_id)
    with db.transaction() as session:
        found = store_of(session).inbox.record_and_find(session, "sim", f"m-{uuid.uuid4().hex}", "t", job_id, NOW)
        assert found.first and found.task is not None and found.task_id == task_id
        task = found.task
        _clean_and_held(session, task)
        assert "input" not in inspect(task).dict and "outcome" not in inspect(task).dict
        assert task.outcome == {"ok": True} and "input" not in inspect(task).dict  # loaded alone
        assert _columns(task) == expected
