"""Waits longer than the longest Celery countdown allowed are held in the database and re-driven
by the outbox sweep, so no countdown ever comes near the Redis visibility_timeout.

Its own module: its stack must not be alive beside another one (Celery's worker state is global).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select

from models import OutboxMessage
from tests.integration.stack import Stack


def test_a_long_wait_is_held_in_the_database_and_re_driven_by_the_sweep(held_stack: Stack) -> None:
    api_key, _, path = held_stack.new_client()
    held_stack.callbacks.set_status(path, [500, 204])
    cid = f"held-{uuid.uuid4().hex[:8]}"
    assert (
        held_stack.submit(
            api_key, {"correlation_id": cid, "input": {"simulate": {"drop": ["job.accepted"]}}}
        ).status_code
        == 202
    )
    body = held_stack.wait_for_task(
        api_key, cid, until=lambda b: "relay.attempt_failed" in [e["kind"] for e in b["timeline"]]
    )
    with held_stack.db.transaction() as session:
        row = session.scalars(
            select(OutboxMessage).where(OutboxMessage.correlation_id == cid, OutboxMessage.kind == "relay")
        ).one()
        # 3 s (±20 %) is longer than the 1 s allowed as a Celery countdown: held, not at the broker.
        assert row.dispatched_at is None and row.next_attempt_at is not None
        due = row.next_attempt_at
    publisher = held_stack.app.extensions["liaison"].publisher

    def dispatched() -> bool:
        with held_stack.db.transaction() as session:
            current = session.get(OutboxMessage, row.id)
            assert current is not None
            return current.dispatched_at is not None

    # The database is shared with other tests, so watch this row rather than the sweep's counts.
    publisher.sweep(due - timedelta(seconds=0.5), grace_s=10, lease_s=1800)
    assert not dispatched()  # not due yet
    publisher.sweep(due + timedelta(seconds=0.1), grace_s=10, lease_s=1800)
    held_stack.callbacks.wait_for(lambda reqs: [r.status for r in reqs if r.path == path] == [500, 204], timeout=10)
    assert body["state"] == "succeeded"
