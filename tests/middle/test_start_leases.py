"""Start leases (``service.start_leases``, issue 44 point 5): a submission a dead worker took with it
is re-driven by the sweep once its own short lease runs out, long before ``LIAISON_OUTBOX_LEASE_S``,
and a released one that never started stops holding its vendor's capacity then. The clock is passed
in; what went out is what the stub broker got."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.fair_share import DispatchPolicy
from core.states import EventType
from foundation.settings import Settings
from models import publishing
from models.db import Database
from models.messages import OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service import dispatch, start_leases
from service.vendor_events import receive_event
from tests.middle.builders import NOW, at_vendor, later, new_client, submit, timeline
from tests.middle.conftest import Published
from webhooks.events import VendorEvent

#: the shipped outbox lease: nothing here waits for it
OUTBOX_LEASE_S = 1800
GRACE_S = 10
#: what create_app installs from the shipped settings (a submit: two calls of 30 s, each after up to
#: 2 s for a rate slot, plus the 30 s margin; a relay: its 15 s deadline plus the margin)
LEASES = Settings.from_env({}).start_leases
SUBMIT_LEASE_S = LEASES["submit"]


@pytest.fixture
def capped(db: Database, published: Published) -> Iterator[None]:
    """Fair dispatch with a capacity of 1 for provider ``capped``, and the shipped start leases."""
    dispatch.install(db.sessionmaker, DispatchPolicy(window=4, aging_s=60, caps={"capped": 1}))
    db.sessionmaker.kw["info"][publishing.START_LEASES] = dict(LEASES)
    yield
    db.sessionmaker.kw["info"].pop(dispatch.POLICY, None)


def _task(session: Session, correlation_id: str) -> ExternalTask:
    return session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == correlation_id)).one()


def _row(session: Session, correlation_id: str) -> OutboxMessage:
    task = _task(session, correlation_id)
    return session.scalars(
        select(OutboxMessage).where(OutboxMessage.task_id == task.id, OutboxMessage.kind == "submit")
    ).one()


def _open_at_vendor(db: Database) -> int:
    with db.transaction() as session:
        return store_of(session).dispatch.open_at_vendor(session, "capped")


def _sweep(published: Published, now: datetime) -> int:
    return published.publisher.sweep(now, GRACE_S, OUTBOX_LEASE_S)


def test_the_shipped_start_lease_is_a_small_part_of_the_outbox_lease() -> None:
    assert SUBMIT_LEASE_S == 2 * (30 + 2) + 30 and LEASES["relay"] == 15 + 30
    assert Settings.from_env({}).outbox_lease_s == OUTBOX_LEASE_S


def test_a_publication_stamps_a_start_lease(db: Database, published: Published, capped: None) -> None:
    with db.transaction() as session:
        submit(session, new_client(session), "one", provider="capped")
    with db.transaction() as session:
        row = _row(session, "one")
        assert row.dispatched_at == NOW
        assert row.start_lease_until == NOW + timedelta(seconds=SUBMIT_LEASE_S)


def test_a_released_submission_lost_before_it_started_is_redriven_at_its_start_lease(
    db: Database, published: Published, capped: None
) -> None:
    """Its worker died with the message (Redis keeps an unacked message for 12 h): the sweep puts the
    task back in its queue and releases it again once the start lease ran out, not after 1,800 s."""
    with db.transaction() as session:
        submit(session, new_client(session), "lost", provider="capped")
    published.forget()
    assert _open_at_vendor(db) == 1

    assert _sweep(published, NOW + timedelta(seconds=SUBMIT_LEASE_S - 1)) == 0
    assert published.sent == []  # the lease lives: a worker may still start it

    at = NOW + timedelta(seconds=SUBMIT_LEASE_S + 1)
    _sweep(published, at)
    with db.transaction() as session:
        row, task = _row(session, "lost"), _task(session, "lost")
        assert published.sent == [("liaison.submit", row.id)]  # re-driven, once
        assert timeline(session, task)[-2:] == [start_leases.REQUEUED, "submit.released"]
        assert task.dispatched_at == at and row.parked_reason is None
        # stamped anew (by the publish hook, on the wall clock) with a new lease
        assert row.dispatched_at is not None and row.dispatched_at != NOW
        assert row.start_lease_until == row.dispatched_at + timedelta(seconds=SUBMIT_LEASE_S)
    assert _open_at_vendor(db) == 1  # counted again, once


def test_a_released_submission_whose_start_lease_ran_out_stops_holding_the_vendors_capacity(
    db: Database, published: Published, capped: None
) -> None:
    """The capacity (1) was spent on a task whose message was lost: once its start lease runs out, a
    more urgent task queued behind it gets the room, and the lost one waits its turn in the queue
    (the vendor still never has more than its capacity)."""
    with db.transaction() as session:
        shop = new_client(session)
        submit(session, shop, "lost", provider="capped")
        submit(session, shop, "urgent", now=later(1), provider="capped", priority=1)
    with db.transaction() as session:
        assert _task(session, "urgent").wait_reason == "vendor_capacity"
    published.forget()

    _sweep(published, NOW + timedelta(seconds=SUBMIT_LEASE_S + 1))
    with db.transaction() as session:
        lost, urgent = _task(session, "lost"), _task(session, "urgent")
        assert published.sent == [("liaison.submit", _row(session, "urgent").id)]
        assert urgent.dispatched_at is not None
        assert lost.dispatched_at is None and lost.wait_reason == "vendor_capacity"
        assert _row(session, "lost").parked_reason == dispatch.QUEUED_ROW
        assert start_leases.REQUEUED in timeline(session, lost)
    assert _open_at_vendor(db) == 1


def test_a_started_submission_whose_worker_died_is_republished_and_keeps_counting(
    db: Database, published: Published, capped: None
) -> None:
    """A delivery that started may have reached the vendor: it keeps its place in the capacity and
    is re-published as it is, once the lease its start set ran out."""
    started_at = later(5)
    with db.transaction() as session:
        submit(session, new_client(session), "started", provider="capped")
        row = _row(session, "started")
        row.deliveries = 1  # what a start writes (workers.tasks.attempt)
        row.start_lease_until = start_leases.until(started_at, SUBMIT_LEASE_S)
    published.forget()

    assert _sweep(published, NOW + timedelta(seconds=SUBMIT_LEASE_S + 1)) == 0  # the start renewed it
    at = started_at + timedelta(seconds=SUBMIT_LEASE_S + 1)
    assert _sweep(published, at) == 1
    with db.transaction() as session:
        row, task = _row(session, "started"), _task(session, "started")
        assert published.sent == [("liaison.submit", row.id)]
        assert start_leases.REQUEUED not in timeline(session, task)
        assert row.dispatched_at == at and task.dispatched_at == NOW
    assert _open_at_vendor(db) == 1


def test_a_copy_of_a_message_published_again_since_does_nothing(
    db: Database, published: Published, capped: None
) -> None:
    with db.transaction() as session:
        submit(session, new_client(session), "copied", provider="capped")
    with db.transaction() as session:
        first = _row(session, "copied").dispatched_at
    assert first is not None
    with db.transaction() as session:
        row = _row(session, "copied")
        assert not start_leases.superseded(row, first.isoformat())
        assert not start_leases.superseded(row, None)  # a copy sent without a stamp runs
        row.deliveries = 1
    _sweep(published, NOW + timedelta(seconds=SUBMIT_LEASE_S + 1))
    with db.transaction() as session:
        row = _row(session, "copied")
        assert start_leases.superseded(row, first.isoformat())
        assert row.dispatched_at is not None and not start_leases.superseded(row, row.dispatched_at.isoformat())


def test_a_submission_back_in_its_queue_is_not_run_by_a_late_copy(
    db: Database, published: Published, capped: None
) -> None:
    with db.transaction() as session:
        shop = new_client(session)
        submit(session, shop, "lost", provider="capped")
        submit(session, shop, "urgent", now=later(1), provider="capped", priority=1)
    with db.transaction() as session:
        first = _row(session, "lost").dispatched_at
    assert first is not None
    _sweep(published, NOW + timedelta(seconds=SUBMIT_LEASE_S + 1))
    with db.transaction() as session:
        assert start_leases.superseded(_row(session, "lost"), first.isoformat())
        assert start_leases.superseded(_row(session, "lost"), None)


def test_a_relay_lost_with_its_worker_is_redriven_at_its_start_lease(db: Database, published: Published) -> None:
    """A relay process SIGKILLed with a callback's message (Redis keeps it unacked for 12 h): the
    sweep publishes the relay again once the relay's own lease (its deadline plus the margin) ran
    out, not after the 1,800 s outbox lease; the late copy of the lost message then does nothing."""
    db.sessionmaker.kw["info"][publishing.START_LEASES] = dict(LEASES)
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "relayed", "job-1")
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-1"), NOW)
        task_id = task.id
    with db.transaction() as session:
        relay = session.scalars(
            select(OutboxMessage).where(OutboxMessage.task_id == task_id, OutboxMessage.kind == "relay")
        ).one()
        lost_stamp, relay_id = relay.dispatched_at, relay.id
        assert lost_stamp is not None and relay.start_lease_until == lost_stamp + timedelta(seconds=LEASES["relay"])
    published.forget()

    assert _sweep(published, lost_stamp + timedelta(seconds=LEASES["relay"] - 1)) == 0
    assert published.sent == []  # the lease lives: a relay worker may still start it
    assert _sweep(published, lost_stamp + timedelta(seconds=LEASES["relay"] + 1)) == 1
    assert published.sent == [("liaison.relay", relay_id)]
    with db.transaction() as session:
        relay = session.get_one(OutboxMessage, relay_id)
        again = relay.dispatched_at
        assert again is not None and again != lost_stamp  # published again, under a new stamp
        assert start_leases.superseded(relay, lost_stamp.isoformat())  # the lost copy, if it comes back
        assert not start_leases.superseded(relay, again.isoformat())
