"""The store's lifecycle family (``models/store/lifecycle.py``) on both databases: the claims of due
deadlines and heartbeats, the cancel's look-ups, the operator's and a hint's, a pending check, and
a bulk replay's locks (taken on PostgreSQL, none on SQLite). PostgreSQL is the machine's (a fresh
database for this module); where it is absent its half skips (and fails under CI).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from core.states import State
from models.client import Client
from models.db import Database
from models.messages import OutboxKind, ProcessedMessage
from models.store.lifecycle import CANCEL_REQUESTED_ENTRY, DEADLINES
from models.task import ExternalTask, TaskEvent
from tests.middle.builders import NOW, add_outbox_row, add_task

EARLIER = NOW - timedelta(minutes=5)
LATER = NOW + timedelta(minutes=5)
ACCEPTANCE, EXECUTION = DEADLINES


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _task(session: Session, client: Client | None = None, **columns: Any) -> ExternalTask:
    return add_task(session, client, **{"input": {"a": 1}, **columns})


@contextmanager
def _statements(db: Database) -> Iterator[list[str]]:
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


# --- deadlines and heartbeats ---------------------------------------------------------------------


def test_due_deadlines_claims_the_overdue_unescalated_tasks_oldest_first(db: Database):
    with db.transaction() as session:
        later_due = _task(session, state=State.SUBMITTED.value, acceptance_deadline=EARLIER)
        due = _task(session, state=State.REQUESTED.value, acceptance_deadline=EARLIER - timedelta(minutes=1))
        not_yet = _task(session, state=State.SUBMITTED.value, acceptance_deadline=LATER)
        accepted = _task(session, state=State.ACCEPTED.value, acceptance_deadline=EARLIER)
        escalated = _task(session, acceptance_deadline=EARLIER, acceptance_escalated_at=EARLIER)
        ids = {t.id for t in (later_due, due, not_yet, accepted, escalated)}
    with db.transaction() as session:
        found = [t.id for t in db.store.lifecycle.due_deadlines(session, ACCEPTANCE, NOW, 1000) if t.id in ids]
    assert found == [due.id, later_due.id]


def test_due_deadlines_reads_no_payload_and_honours_the_batch(db: Database):
    with db.transaction() as session:
        for _ in range(3):
            _task(session, state=State.ACCEPTED.value, execution_deadline=EARLIER - timedelta(days=400))
    with db.transaction() as session:
        claimed = db.store.lifecycle.due_deadlines(session, EXECUTION, NOW, 2)
        assert len(claimed) == 2
        assert all("input" not in t.__dict__ and "outcome" not in t.__dict__ for t in claimed)


def test_mark_escalated_takes_the_task_off_its_deadline(db: Database):
    with db.transaction() as session:
        task = _task(session, state=State.ACCEPTED.value, execution_deadline=EARLIER)
    with db.transaction() as session:
        db.store.lifecycle.mark_escalated(session, task.id, EXECUTION, NOW)
    with db.transaction() as session:
        assert task.id not in {t.id for t in db.store.lifecycle.due_deadlines(session, EXECUTION, NOW, 1000)}
        again = session.get(ExternalTask, task.id)
        assert again is not None and again.execution_escalated_at == NOW and again.acceptance_escalated_at is None


def test_heartbeats_due_claims_the_armed_tasks_at_the_vendor(db: Database):
    with db.transaction() as session:
        due = _task(session, state=State.ACCEPTED.value, heartbeat_due_at=EARLIER)
        not_yet = _task(session, state=State.ACCEPTED.value, heartbeat_due_at=LATER)
        final = _task(session, state=State.SUCCEEDED.value, heartbeat_due_at=EARLIER)
        ids = {due.id, not_yet.id, final.id}
    with db.transaction() as session:
        found = [t for t in db.store.lifecycle.heartbeats_due(session, NOW, 1000) if t.id in ids]
        assert [t.id for t in found] == [due.id]
        assert found[0].heartbeat_due_at == EARLIER


def test_a_claim_skips_the_tasks_another_transaction_holds(db: Database):
    if db.is_sqlite:
        pytest.skip("SQLite serialises writers (BEGIN IMMEDIATE): a second claim waits, it skips nothing")
    with db.transaction() as session:
        held = _task(session, state=State.ACCEPTED.value, heartbeat_due_at=EARLIER - timedelta(days=1))
    with db.transaction() as holder:
        assert holder.get(ExternalTask, held.id, with_for_update=True) is not None
        with db.transaction() as session:
            assert held.id not in {t.id for t in db.store.lifecycle.heartbeats_due(session, NOW, 1000)}


def test_lock_without_payload_reads_the_task_afresh_without_input_or_outcome(db: Database):
    with db.transaction() as session:
        task = _task(session, state=State.ACCEPTED.value, outcome={"big": 1})
    with db.transaction() as session:
        locked = db.store.lifecycle.lock_without_payload(session, task.id)
        assert locked.id == task.id and locked.state == State.ACCEPTED.value
        assert "input" not in locked.__dict__ and "outcome" not in locked.__dict__


# --- cancellation ---------------------------------------------------------------------------------


def test_cancel_key_use_names_what_the_key_was_recorded_for(db: Database):
    source, key = f"cancel:{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    with db.transaction() as session:
        session.add(ProcessedMessage(source=source, message_id=key, message_type="cancel:42", processed_at=NOW))
    with db.transaction() as session:
        assert db.store.lifecycle.cancel_key_use(session, source, key) == "cancel:42"
        assert db.store.lifecycle.cancel_key_use(session, source, "another") is None


def test_open_submit_is_the_tasks_submit_row_until_it_is_done(db: Database):
    with db.transaction() as session:
        task = _task(session)
        add_outbox_row(session, task, OutboxKind.RELAY)
        submit = add_outbox_row(session, task, OutboxKind.SUBMIT)
        finished = _task(session)
        add_outbox_row(session, finished, OutboxKind.SUBMIT, done_at=NOW)
    with db.transaction() as session:
        found = db.store.lifecycle.open_submit(session, task.id)
        assert found is not None and found.id == submit.id
        assert db.store.lifecycle.open_submit(session, finished.id) is None


def test_cancel_request_is_the_latest_cancel_requested_entry(db: Database):
    with db.transaction() as session:
        task = _task(session)
        for kind, reason in ((CANCEL_REQUESTED_ENTRY, "first"), (CANCEL_REQUESTED_ENTRY, "second"), ("x", "no")):
            session.add(TaskEvent(task_id=task.id, kind=kind, at=NOW, detail={"reason": reason}))
        bare = _task(session)
    with db.transaction() as session:
        assert db.store.lifecycle.cancel_request(session, task.id) == {"reason": "second"}
        assert db.store.lifecycle.cancel_request(session, bare.id) is None


# --- look-ups and a pending check -----------------------------------------------------------------


def test_tasks_named_finds_every_clients_task_of_that_name_or_one_clients(db: Database):
    name = f"order-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        one = _task(session, correlation_id=name)
        two = _task(session, correlation_id=name)
        _task(session)
    with db.transaction() as session:
        assert {t.id for t in db.store.lifecycle.tasks_named(session, name, None, 50)} == {one.id, two.id}
        assert [t.id for t in db.store.lifecycle.tasks_named(session, name, two.client_id, 50)] == [two.id]
        assert len(db.store.lifecycle.tasks_named(session, name, None, 1)) == 1
        assert db.store.lifecycle.tasks_named(session, "nobody", None, 50) == []


def test_task_for_hint_finds_the_providers_job(db: Database):
    job = f"job-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        task = _task(session, vendor_job_id=job, state=State.ACCEPTED.value)
    with db.transaction() as session:
        found = db.store.lifecycle.task_for_hint(session, "sim", job)
        assert found is not None and found.id == task.id and "input" not in found.__dict__
        assert db.store.lifecycle.task_for_hint(session, "other", job) is None


def test_pending_check_is_the_tasks_check_row_until_it_is_done(db: Database):
    with db.transaction() as session:
        task = _task(session)
        check = add_outbox_row(session, task, OutboxKind.CHECK, deliveries=1)
        done = _task(session)
        add_outbox_row(session, done, OutboxKind.CHECK, done_at=NOW)
    with db.transaction() as session:
        found = db.store.lifecycle.pending_check(session, task.id)
        assert found is not None and found.id == check.id and found.deliveries == 1
        assert db.store.lifecycle.pending_check(session, done.id) is None


# --- a bulk replay's locks ------------------------------------------------------------------------


def test_lock_for_replay_locks_the_tasks_on_postgresql_and_takes_nothing_on_sqlite(db: Database):
    with db.transaction() as session:
        rows = [add_outbox_row(session, _task(session), OutboxKind.SUBMIT) for _ in range(2)]
    with db.transaction() as session, _statements(db) as sent:
        db.store.lifecycle.lock_for_replay(session, [row.id for row in rows])
        db.store.lifecycle.lock_for_replay(session, [])
    if db.is_sqlite:
        assert sent == []  # BEGIN IMMEDIATE serialised the transaction already
    else:
        assert len(sent) == 1 and sent[0].endswith("ORDER BY external_tasks.id FOR NO KEY UPDATE")
