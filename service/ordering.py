"""A task's callbacks in order (``core/ordering.py`` in SQL): which earlier relay holds a later one,
holding it, and releasing it when the earlier one is settled.

A relay that finds an earlier relay of its task still on its way does not poll: it is *held* (its
row waits in the database, ``parked_reason = awaiting_earlier``, no message in the broker) and it
flags the relay it waits for (``holds_back``). Whatever settles that one — delivered, dead-lettered,
parked behind a disabled endpoint — reads the flag with the row it locked anyway and re-publishes
the relays waiting behind it, in the same transaction. So the happy path, where nothing waits,
costs no statement: the check is a subquery of the relay's own start statement, the flag a column
of a row already read. A held relay also carries a recheck time (``LIAISON_OUTBOX_LEASE_S``) the
outbox sweep honours, should a release ever be missed.

A task's channel rows keep their order another way (``workers.tasks.channel``): a row comes back
while an earlier one is undone (:func:`earlier_channel_rows` says when those are next due).

Each function runs in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from core.outbox_states import ParkedReason
from models.messages import OutboxMessage
from models.publishing import publish_after_commit
from models.store import store_of
from models.store.outbox import held_by as held_by  # a relay's start statement reads it (service.claims)

#: ``parked_reason`` of a relay held until an earlier relay of its task is settled.
AWAITING_EARLIER = ParkedReason.AWAITING_EARLIER.value


def hold(session: Session, row: OutboxMessage, earlier_id: int, now: datetime, recheck_s: float) -> bool:
    """Hold ``row`` until relay ``earlier_id`` is settled; False when that one was settled since the
    caller looked, or is locked right now (then look again shortly).

    The flag is set by a conditional UPDATE of the earlier row taken only if it is free (``SKIP
    LOCKED``): the caller holds ``row`` locked, and whatever settles the earlier one may be waiting
    for that lock to release ``row`` (:func:`settled`), so waiting here could close a circle.
    Settling and holding thus never miss each other: either the flag is set before the settling
    transaction locks the earlier row (and it sees the flag), or this start looks again after it."""
    outbox = store_of(session).outbox
    if not outbox.flag_holding_back(session, earlier_id):
        return False
    outbox.await_earlier(row, now + timedelta(seconds=recheck_s))  # the sweep's recheck, should a release be missed
    if row.task_id is not None:
        detail = {"message_id": row.message_id, "sequence": row.sequence, "type": row.payload.get("type")}
        store_of(session).timeline.add(session, row.task_id, "relay.waiting", now, detail)
    return True


def settled(session: Session, row: OutboxMessage, now: datetime, gap: str | None = None) -> None:
    """``row``, a relay, will not hold its task's later relays any more. ``gap``: why it was not
    delivered (it is recorded on the timeline: the later ones go ahead without it). The relays
    held behind it are re-published; each checks again at its start."""
    if row.sequence is None or row.task_id is None:
        return
    if gap is not None:
        detail = {
            "message_id": row.message_id,
            "sequence": row.sequence,
            "type": row.payload.get("type"),
            "reason": gap,
        }
        store_of(session).timeline.add(session, row.task_id, "relay.gap", now, detail)
    if not row.holds_back:
        return
    outbox = store_of(session).outbox
    outbox.holds_back(row, False)
    # Waited for, not skipped: a held relay may be locked by a webhook coalescing a progress report
    # into it, and passed over it would stall until the sweep's recheck. Nothing that locks a held
    # relay waits for this row meanwhile (a relay's start does not: :func:`hold`), so no circle.
    waiting = outbox.held_behind(session, row)
    for held in waiting:
        outbox.release_held(held)
    publish_after_commit(session, waiting)


def earlier_channel_rows(session: Session, row: OutboxMessage) -> list[datetime | None] | None:
    """When the earlier channel rows of the same task not yet done are next due (None for one
    queued or in flight now); None when there is none (rejections have no task)."""
    if row.task_id is None:
        return None
    found = store_of(session).outbox.earlier_channel_due(session, row.task_id, row.id)
    return found or None
