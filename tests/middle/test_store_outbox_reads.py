"""The outbox family's reads and locks at the end of ``models/store/outbox.py``, one contract on both
databases: a task's callbacks in order (``held_by``, ``held_behind``, ``earlier_channel_due``), a
progress report's copies (``lock_if_free``, ``lock_channel_copy``), a task's next retry
(``next_retry_at``) and the sweep's claim (``claim_for_sweep``). PostgreSQL is the machine's (a fresh
database for this module, ``tests/integration/services.py``); where it is absent its half skips
(and fails under CI, which must start it). The moves and statements of the family are driven by
``tests/middle/test_store_contract.py``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.outbox_states import ParkedReason
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.store.outbox import held_by
from models.task import ExternalTask
from tests.middle.builders import NOW, add_outbox_row, add_task

LATER = NOW + timedelta(hours=1)
AWAITING = ParkedReason.AWAITING_EARLIER.value


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _row(session: Session, task: ExternalTask, kind: str = OutboxKind.RELAY, **columns: Any) -> OutboxMessage:
    return add_outbox_row(session, task, kind, **{"payload": {"type": "task.accepted"}, **columns})


def test_held_by_names_the_latest_earlier_relay_still_holding(db: Database):
    with db.transaction() as session:
        task = add_task(session)
        first = _row(session, task, sequence=1)
        second = _row(session, task, sequence=2, dispatched_at=NOW)
        _row(session, task, sequence=3, done_at=NOW)  # done: holds nothing
        fourth = _row(session, task, sequence=4)
        lone = _row(session, add_task(session), sequence=9)  # another task's relays are never looked at
        statement = select(OutboxMessage.id, held_by()).where(OutboxMessage.id.in_([first.id, fourth.id, lone.id]))
        looks = {row.id: row[1] for row in session.execute(statement)}
        assert looks == {first.id: None, fourth.id: second.id, lone.id: None}


def test_held_behind_are_the_later_relays_awaiting_in_sequence_order(db: Database):
    with db.transaction() as session:
        task = add_task(session)
        earlier = _row(session, task, sequence=1, holds_back=True)
        third = _row(session, task, sequence=3, parked_reason=AWAITING, next_attempt_at=LATER)
        second = _row(session, task, sequence=2, parked_reason=AWAITING, next_attempt_at=LATER)
        _row(session, task, sequence=4, parked_reason=AWAITING, done_at=NOW)  # done
        _row(session, task, sequence=5)  # not held
        _row(session, add_task(session), sequence=6, parked_reason=AWAITING)  # another task's
        found = db.store.outbox.held_behind(session, earlier)
        assert [row.id for row in found] == [second.id, third.id]
        assert db.store.outbox.held_behind(session, third) == []


def test_earlier_channel_due_lists_the_earlier_undone_channel_rows(db: Database):
    with db.transaction() as session:
        task = add_task(session)
        waiting = _row(session, task, OutboxKind.CHANNEL, next_attempt_at=LATER)
        in_flight = _row(session, task, OutboxKind.CHANNEL, dispatched_at=NOW)
        _row(session, task, OutboxKind.CHANNEL, done_at=NOW)
        _row(session, task)  # a relay: not a channel row
        row = _row(session, task, OutboxKind.CHANNEL)
        later = _row(session, task, OutboxKind.CHANNEL)
        assert waiting.id < in_flight.id < row.id < later.id
        assert sorted(db.store.outbox.earlier_channel_due(session, task.id, row.id), key=str) == sorted(
            [LATER, None], key=str
        )
        assert db.store.outbox.earlier_channel_due(session, task.id, waiting.id) == []


def test_next_retry_at_is_the_earliest_retry_of_the_other_rows(db: Database):
    soon, later = NOW + timedelta(minutes=1), NOW + timedelta(minutes=5)
    with db.transaction() as session:
        task = add_task(session)
        finished = _row(session, task, next_attempt_at=NOW)  # the one finishing: not counted
        _row(session, task, next_attempt_at=later)
        _row(session, task, next_attempt_at=soon, parked_reason=AWAITING)  # held, not retrying
        _row(session, task, next_attempt_at=NOW, done_at=NOW)  # done
        assert db.store.outbox.next_retry_at(session, task.id, finished.id) == later
        alone = add_task(session)
        assert db.store.outbox.next_retry_at(session, alone.id, finished.id) is None


def test_a_progress_reports_copies_are_locked_by_id_and_by_message_id(db: Database):
    with db.transaction() as session:
        task = add_task(session)
        relay = _row(session, task)
        channel = _row(session, task, OutboxKind.CHANNEL)
        outbox = db.store.outbox
        assert outbox.lock_if_free(session, relay.id) is relay
        assert outbox.lock_if_free(session, relay.id + 10_000) is None
        assert outbox.lock_channel_copy(session, channel.message_id) is channel
        assert outbox.lock_channel_copy(session, relay.message_id) is None  # a relay, not a channel row


def test_claim_for_sweep_takes_what_was_missed_and_leaves_what_waits(db: Database):
    now, grace, lease = NOW + timedelta(days=400), 60, 600  # later than every other test's rows
    old = now - timedelta(hours=1)
    with db.transaction() as session:
        task = add_task(session)
        missed = _row(session, task, created_at=old)  # never published
        due = _row(session, task, next_attempt_at=now)  # a held retry, due
        died = _row(session, task, dispatched_at=now, start_lease_until=now)  # its start lease ran out
        lost = _row(session, task, dispatched_at=old)  # published, neither done nor retried within the lease
        recheck = _row(session, task, parked_reason=AWAITING, next_attempt_at=now)  # a held relay's recheck
        _row(session, task, created_at=now)  # new: within its grace
        _row(session, task, next_attempt_at=now + timedelta(seconds=1))  # not yet due
        _row(session, task, dispatched_at=now, start_lease_until=now + timedelta(seconds=1))  # still leased
        _row(session, task, created_at=old, done_at=old)  # done
        _row(session, task, created_at=old, parked_reason=ParkedReason.ENDPOINT_GONE.value)  # waits for a person
        _row(session, task, created_at=old, parked_reason=ParkedReason.QUEUED.value)  # waits for its turn
        ids = [missed.id, due.id, died.id, lost.id, recheck.id]
        swept = db.store.outbox.claim_for_sweep(session, now, grace, lease, 1000)
        assert [row.id for row in swept if row.task_id == task.id] == ids
        assert len(db.store.outbox.claim_for_sweep(session, now, grace, lease, 2)) == 2
