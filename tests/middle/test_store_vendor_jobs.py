"""The store's ``vendor_jobs`` family (``models/store/vendor_jobs.py``), one contract on both databases:
what the poll job, reconciliation, the start leases and vendor events ask of tasks at a vendor.
PostgreSQL is the machine's (a fresh database for this module, ``tests/integration/services.py``);
where it is absent its half skips (and fails under CI, which must start it).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from core.fair_share import RATE_LIMIT, VENDOR_CAPACITY
from core.states import State
from models.attention import OrphanEvent
from models.client import Client
from models.db import Database
from models.messages import OutboxKind
from models.task import ExternalTask
from tests.middle.builders import NOW, add_client, add_outbox_row, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _provider() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def _task(session: Session, client: Client, provider: str, **columns: Any) -> ExternalTask:
    return add_task(session, client, provider=provider, **columns)


def test_claim_due_polls_takes_every_clients_first_before_anyones_second(db: Database):
    provider = _provider()
    with db.transaction() as session:
        busy, quiet = add_client(session), add_client(session)
        at_vendor = {"state": State.SUBMITTED.value}
        b1 = _task(session, busy, provider, poll_due_at=NOW - timedelta(minutes=3), **at_vendor)
        b2 = _task(session, busy, provider, poll_due_at=NOW - timedelta(minutes=2), **at_vendor)
        q1 = _task(session, quiet, provider, poll_due_at=NOW - timedelta(minutes=1), **at_vendor)
        _task(session, busy, provider, poll_due_at=NOW + timedelta(minutes=1), **at_vendor)  # not due
        _task(session, busy, provider, poll_due_at=NOW - timedelta(minutes=9))  # requested: not at the vendor
        _task(session, busy, _provider(), poll_due_at=NOW - timedelta(minutes=9), **at_vendor)  # another vendor's
        checking = _task(session, quiet, provider, poll_due_at=NOW - timedelta(minutes=9), **at_vendor)
        add_outbox_row(session, checking, OutboxKind.CHECK)  # its check is pending: it stays due
        claimed = db.store.vendor_jobs.claim_due_polls(session, provider, NOW, 10)
        assert [t.id for t in claimed] == [b1.id, q1.id, b2.id]
        assert [t.id for t in db.store.vendor_jobs.claim_due_polls(session, provider, NOW, 2)] == [b1.id, q1.id]
        assert db.store.vendor_jobs.claim_due_polls(session, _provider(), NOW, 10) == []


def test_claim_quiet_takes_tasks_at_the_vendor_with_no_news_oldest_first(db: Database):
    provider = _provider()
    with db.transaction() as session:
        client = add_client(session)
        older = _task(session, client, provider, state=State.ACCEPTED.value, checked_at=NOW - timedelta(hours=2))
        old = _task(session, client, provider, state=State.SUBMITTED.value, checked_at=NOW - timedelta(hours=1))
        _task(session, client, provider, state=State.SUBMITTED.value, checked_at=NOW)  # heard from just now
        _task(session, client, provider, state=State.SUCCEEDED.value, checked_at=NOW - timedelta(hours=3))  # final
        _task(session, client, provider, checked_at=NOW - timedelta(hours=3))  # requested: not at the vendor
        found = db.store.vendor_jobs.claim_quiet(session, provider, 900, NOW, 10)
        assert [t.id for t in found] == [older.id, old.id]
        assert [t.id for t in db.store.vendor_jobs.claim_quiet(session, provider, 900, NOW, 1)] == [older.id]


def test_claim_unsubmitted_takes_released_tasks_stuck_and_their_open_submit_rows(db: Database):
    provider = _provider()
    quiet = NOW - timedelta(hours=1)
    with db.transaction() as session:
        client = add_client(session)
        stuck = _task(session, client, provider, checked_at=quiet, dispatched_at=quiet)
        _task(session, client, provider, checked_at=quiet)  # queued: waits for its turn, not stuck
        recent = _task(session, client, provider, checked_at=NOW, dispatched_at=NOW)
        vendor_jobs = db.store.vendor_jobs
        found = vendor_jobs.claim_unsubmitted(session, 300, NOW, 100)
        assert stuck.id in [t.id for t in found] and recent.id not in [t.id for t in found]
        assert all(t.state == State.REQUESTED.value and t.dispatched_at is not None for t in found)

        submit = add_outbox_row(session, stuck, OutboxKind.SUBMIT)
        add_outbox_row(session, stuck, OutboxKind.SUBMIT, done_at=NOW)  # done
        add_outbox_row(session, stuck, OutboxKind.SUBMIT, parked_reason="queued")  # queued
        add_outbox_row(session, stuck, OutboxKind.SUBMIT, next_attempt_at=NOW)  # a retry scheduled: not stuck
        add_outbox_row(session, stuck, OutboxKind.CANCEL)  # not a submission
        add_outbox_row(session, recent, OutboxKind.SUBMIT)  # not asked for
        assert [row.id for row in vendor_jobs.open_submits(session, [stuck.id])] == [submit.id]


def test_a_lost_submission_goes_back_to_its_queue(db: Database):
    provider = _provider()
    with db.transaction() as session:
        client = add_client(session)
        released = _task(session, client, provider, dispatched_at=NOW)
        queued = _task(session, client, provider)  # not released
        submitted = _task(session, client, provider, state=State.SUBMITTED.value, dispatched_at=NOW)
        vendor_jobs = db.store.vendor_jobs
        found = vendor_jobs.lock_released_unsubmitted(session, [released.id, queued.id, submitted.id])
        assert [tuple(row) for row in found] == [(released.id, provider, client.id)]
        vendor_jobs.unrelease(session, [released.id], VENDOR_CAPACITY)
    with db.transaction() as session:
        again = session.get(ExternalTask, released.id)
        assert again is not None and again.dispatched_at is None and again.wait_reason == VENDOR_CAPACITY


def test_note_rate_limited_says_so_once_while_requested(db: Database):
    provider = _provider()
    with db.transaction() as session:
        client = add_client(session)
        task = _task(session, client, provider, dispatched_at=NOW)
        done = _task(session, client, provider, state=State.SUBMITTED.value, dispatched_at=NOW)
    with db.transaction() as session:
        assert db.store.vendor_jobs.note_rate_limited(session, task.id) is True
        assert db.store.vendor_jobs.note_rate_limited(session, task.id) is False  # said so already
        assert db.store.vendor_jobs.note_rate_limited(session, done.id) is False  # at the vendor: no wait
    with db.transaction() as session:
        again = session.get(ExternalTask, task.id)
        assert again is not None and again.wait_reason == RATE_LIMIT


def test_job_of_reference_tells_no_task_from_no_job_yet(db: Database):
    provider = _provider()
    with db.transaction() as session:
        client = add_client(session)
        waiting = _task(session, client, provider)
        known = _task(session, client, provider, vendor_job_id="job-1")
        vendor_jobs = db.store.vendor_jobs
        assert vendor_jobs.job_of_reference(session, provider, known.reference) == "job-1"
        assert vendor_jobs.job_of_reference(session, provider, waiting.reference) == ""
        assert vendor_jobs.job_of_reference(session, _provider(), known.reference) is None  # another vendor's
        assert vendor_jobs.job_of_reference(session, provider, "no-such-reference") is None


def test_open_orphans_are_the_jobs_open_ones_in_arrival_order(db: Database):
    source = _provider()

    def orphan(job: str, received: datetime, state: str = "open") -> OrphanEvent:
        event = OrphanEvent(
            source=source,
            message_id=f"m-{uuid.uuid4().hex}",
            vendor_job_id=job,
            payload={"type": "job.accepted"},
            received_at=received,
            state=state,
        )
        session.add(event)
        session.flush()
        return event

    with db.transaction() as session:
        second = orphan("job-1", NOW)
        first = orphan("job-1", NOW - timedelta(seconds=1))
        orphan("job-1", NOW - timedelta(seconds=2), state="resolved")
        orphan("job-2", NOW)
        found = db.store.vendor_jobs.open_orphans(session, source, "job-1")
        assert [event.id for event in found] == [first.id, second.id]
        assert db.store.vendor_jobs.open_orphans(session, _provider(), "job-1") == []
