"""Start leases (issue 44, point 5): a submit or relay taken by a worker that then died is re-driven
once its own short lease runs out, not after ``LIAISON_OUTBOX_LEASE_S``.

A row's ``start_lease_until`` is stamped when it is published (``models.store.publication.stamp``: the
publication plus ``Settings.start_leases`` for its kind), again when a delivery starts (in the
statement or the flush that counts it, so it costs no statement) and when a retry is scheduled by
countdown (the retry's due time plus the lease). So it runs out only when no message of the row
started in time, or a started one neither finished nor scheduled its retry within the longest a
healthy call takes plus ``LIAISON_START_LEASE_MARGIN_S``: its worker died (SIGKILL, OOM, a host
lost) with the message. On Redis such a message comes back only after the 12 h visibility timeout;
RabbitMQ gives it back when the connection closes, and the lease changes nothing there.

The sweep re-publishes such a row (``runtime.outbox.Publisher.sweep``) with a new stamp. A copy of
the old message that turns up later (a broker that gave it back after all, or one only slow in a
backlog) is *superseded* (:func:`superseded`): it carries the stamp it was published under, and
does nothing once the row carries another, so an early re-drive never leaves two live copies.
At the vendor nothing is done twice either way: a submission keeps its task's reference as the
vendor's ``Idempotency-Key`` and asks ``find`` after an uncertain answer; a relay keeps its
``webhook-id``.

A released submission that never started holds its vendor's ``MAX_IN_FLIGHT`` (fair dispatch counts
released tasks not final) only while its start lease lives: when it runs out, :func:`requeue_unstarted`
puts the task back in its client's queue, in its old place, and the same transaction releases what
the capacity then has room for. The task is re-driven when its turn comes, through the same
admission as any release, so the vendor never has more than its capacity open. A submission that
started (a call may have reached the vendor) keeps counting: it is re-published as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from core.fair_share import VENDOR_CAPACITY
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from service import dispatch

#: the timeline entry of a task whose lost submission went back to its client's queue
REQUEUED = "submit.requeued"


def until(now: datetime, lease_s: float | None) -> datetime | None:
    """The start lease of a delivery starting (or a retry due) at ``now``; None: its kind has none."""
    return None if lease_s is None else now + timedelta(seconds=lease_s)


def expired(row: OutboxMessage, now: datetime) -> bool:
    """The row's message is out (``dispatched_at``) and its start lease ran out."""
    return row.dispatched_at is not None and row.start_lease_until is not None and row.start_lease_until <= now


def superseded(row: OutboxMessage, published: str | None) -> bool:
    """This copy of the row's message must do nothing: its submission went back to its client's
    queue (its release publishes it again), or the row was published again since this copy was
    (``published``: the stamp the copy carries; None for a copy sent without one). A row not
    stamped at all (a publish the broker refused, un-stamped for the sweep) lets any copy run."""
    if row.kind == OutboxKind.SUBMIT and row.parked_reason == dispatch.QUEUED_ROW:
        return True
    if published is None or row.dispatched_at is None:
        return False
    return row.dispatched_at != datetime.fromisoformat(published)


def requeue_unstarted(session: Session, rows: Sequence[OutboxMessage], now: datetime) -> set[int]:
    """Of the sweep's ``rows`` (locked), the submissions whose start lease ran out before any
    delivery started — no call made (``attempts``), none under way (``deliveries``) — to a provider
    with a capacity: their tasks go back to the queue (``dispatched_at`` cleared, the rows parked
    ``queued``), out of the capacity's count, and what has room is released in the same
    transaction (published at commit, by the publish hook). Returns the ids of the rows taken back:
    the sweep does not publish those itself. A task another transaction holds is left to the
    sweep's plain re-publish."""
    policy = dispatch.policy_of(session)
    if policy is None:
        return set()
    lost = {
        row.task_id: row
        for row in rows
        if row.kind == OutboxKind.SUBMIT
        and row.task_id is not None
        and row.attempts == 0
        and row.deliveries == 0
        and expired(row, now)
    }
    if not lost:
        return set()
    vendor_jobs = store_of(session).vendor_jobs
    found = vendor_jobs.lock_released_unsubmitted(session, list(lost))
    taken = [(task_id, provider, client) for task_id, provider, client in found if policy.cap(provider) is not None]
    if not taken:
        return set()
    vendor_jobs.unrelease(session, [task_id for task_id, _, _ in taken], VENDOR_CAPACITY)
    for task_id, _, _ in taken:
        row = lost[task_id]
        store_of(session).outbox.queue(row)
        store_of(session).timeline.add(
            session, task_id, REQUEUED, now, {"reason": "start lease expired", "outbox_id": row.id}
        )
    session.flush()
    for provider, client_id in {provider: client_id for _, provider, client_id in taken}.items():
        dispatch.release(session, provider, client_id, now)
    return {lost[task_id].id for task_id, _, _ in taken}
