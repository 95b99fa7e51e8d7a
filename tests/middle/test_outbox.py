"""``runtime.outbox.Publisher``: publishing after commit, and the sweep's choice of rows (grace,
held retries, lease, parked and done rows), with the broker replaced by a recorder."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from models.db import Database
from models.messages import OutboxMessage
from service.transitions import mark_done, record_attempt_failure
from tests.middle.builders import NOW, later, new_client, submit

if TYPE_CHECKING:
    from tests.middle.conftest import Published

GRACE, LEASE = 10, 1800


def _unpublished(published: Published, n: int = 1, now: datetime = NOW) -> list[int]:
    """Submit rows committed at ``now`` that the broker refused at the commit (it was down): the
    publisher un-stamps them, for the sweep's grace rule."""
    published.broker.down = True
    try:
        with published.publisher.db.transaction() as session:
            client = new_client(session)
            return [submit(session, client, f"order-{i}", now=now).outbox[0].id for i in range(n)]
    finally:
        published.broker.down = False


def _row(db: Database, outbox_id: int) -> OutboxMessage:
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        return row


def _sweep(published: Published, now: datetime) -> list[int]:
    before = len(published.sent)
    published.publisher.sweep(now, GRACE, LEASE)
    return published.ids[before:]


def test_the_commit_publishes_its_new_rows_and_a_rollback_none(db: Database, published: Published) -> None:
    with db.transaction() as session:
        client = new_client(session)
        outbox_id = submit(session, client, "order-1").outbox[0].id
        assert published.sent == []  # nothing before the commit
    assert published.sent == [("liaison.submit", outbox_id)]
    assert _row(db, outbox_id).dispatched_at is not None
    try:
        with db.transaction() as session:
            submit(session, client, "order-2")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert published.ids == [outbox_id]


def test_new_rows_are_inserted_stamped_so_publishing_writes_nothing(db: Database, published: Published) -> None:
    with db.transaction() as session:
        client = new_client(session)
        outbox_id = submit(session, client, "order-1").outbox[0].id
    assert published.sent == [("liaison.submit", outbox_id)]
    row = _row(db, outbox_id)
    assert row.dispatched_at is not None
    assert published.publisher.publish([row]) == 1  # a second publish (the sweep's, a test's) only sends
    assert _row(db, outbox_id).dispatched_at == row.dispatched_at


def test_a_broker_outage_leaves_rows_unstamped_for_the_sweep(db: Database, published: Published) -> None:
    ids = _unpublished(published, 2)
    assert published.sent == []
    assert [_row(db, i).dispatched_at for i in ids] == [None, None]
    assert _sweep(published, later(GRACE + 1)) == ids


def test_a_crash_between_commit_and_publish_costs_the_lease(db: Database, published: Published) -> None:
    """The row was stamped in its transaction, and no message carries it: like a message the broker
    lost, it is re-published once the lease has passed, not after the grace period."""
    published.at_commit = False
    with db.transaction() as session:
        client = new_client(session)
        outbox_id = submit(session, client, "order-1").outbox[0].id
    published.at_commit = True
    stamp = _row(db, outbox_id).dispatched_at
    assert stamp is not None
    assert _sweep(published, stamp + timedelta(seconds=GRACE)) == []
    assert _sweep(published, stamp + timedelta(seconds=LEASE)) == [outbox_id]


def test_the_sweep_leaves_rows_inside_their_grace_period(db: Database, published: Published) -> None:
    [outbox_id] = _unpublished(published)
    assert _sweep(published, later(GRACE - 1)) == []
    assert _sweep(published, later(GRACE)) == [outbox_id]
    assert _row(db, outbox_id).dispatched_at == later(GRACE)


def test_a_published_row_is_swept_again_only_past_its_lease(db: Database, published: Published) -> None:
    [outbox_id] = _unpublished(published)
    assert _sweep(published, later(GRACE)) == [outbox_id]
    assert _sweep(published, later(GRACE + LEASE - 1)) == []  # a worker may still be on it
    assert _sweep(published, later(GRACE + LEASE)) == [outbox_id]  # the broker or the worker lost it


def test_a_held_retry_is_published_when_due_and_its_lease_runs_from_then(db: Database, published: Published) -> None:
    [outbox_id] = _unpublished(published)
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        row.dispatched_at = NOW
        record_attempt_failure(session, row, "vendor 503", later(3600), NOW)
        row.dispatched_at = None  # a long wait is held in the database, not in the broker
    assert _sweep(published, later(3599)) == []
    assert _sweep(published, later(3600)) == [outbox_id]
    held = _row(db, outbox_id)
    assert held.dispatched_at == later(3600) and held.next_attempt_at is None


def test_a_retry_scheduled_in_the_broker_is_not_presumed_lost_before_its_lease(
    db: Database, published: Published
) -> None:
    [outbox_id] = _unpublished(published)
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        row.dispatched_at = NOW
        record_attempt_failure(session, row, "vendor 503", later(600), NOW)  # a countdown in the broker
    assert _sweep(published, later(600 + LEASE - 1)) == []
    assert _sweep(published, later(600 + LEASE)) == [outbox_id]


def test_done_and_parked_rows_are_never_swept(db: Database, published: Published) -> None:
    done, parked, waiting = _unpublished(published, 3)
    with db.transaction() as session:
        done_row, parked_row = session.get(OutboxMessage, done), session.get(OutboxMessage, parked)
        assert done_row is not None and parked_row is not None
        mark_done(session, done_row, NOW, "submit.done")
        parked_row.parked_reason = "endpoint_gone"
    assert _sweep(published, later(10 * LEASE)) == [waiting]


def test_the_sweep_takes_a_batch_oldest_first(db: Database, published: Published) -> None:
    ids = _unpublished(published, 5)
    assert published.publisher.sweep(later(GRACE), GRACE, LEASE, batch=2) == 2
    assert published.ids == ids[:2]
    published.publisher.sweep(later(GRACE), GRACE, LEASE, batch=2)
    assert published.ids == ids[:4]


def test_a_sweep_during_an_outage_unstamps_what_it_claimed(db: Database, published: Published) -> None:
    [outbox_id] = _unpublished(published)
    published.broker.down = True
    assert published.publisher.sweep(later(GRACE), GRACE, LEASE) == 0
    assert _row(db, outbox_id).dispatched_at is None
    published.broker.down = False
    assert _sweep(published, later(GRACE + 1)) == [outbox_id]  # the next sweep, not a lease later
