"""What publishing writes on an outbox row, and what a session notes to publish at its commit.

The publish hook (``models.publishing``) decides *when* rows go to the broker: after the outermost
commit, the rows noted here that are still in the database. What a publication writes on a row is
this module's: its stamp (``core.outbox_states.Move.PUBLISH``: ``dispatched_at``, and a submit's or
relay's start lease from then), written in the row's own transaction, before its INSERT for a new
row, so it costs no statement. The store's PostgreSQL writes insert rows outside the unit of work
(``models.store.postgres_rows``) and stamp and note them here as the hook's flush listeners do for a
flushed one. A leaf of the store: it imports no other module of it, and the hook imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from models.base import utcnow
from models.messages import OutboxMessage

#: the rows this session publishes at its commit, so far (in the session's info)
PENDING = "liaison.outbox.pending"
#: in the info of every session whose maker has the hook (``models.publishing.install``)
INSTALLED = "liaison.outbox.publishes"
#: seconds of start lease by outbox kind (``models.publishing.install``'s ``start_leases``), in the sessions' info
START_LEASES = "liaison.outbox.start_leases"


def start_lease(session: Session, kind: str) -> float | None:
    """Seconds of start lease this session's rows of ``kind`` get (None: the kind keeps only the outbox lease)."""
    leases: Mapping[str, float] = session.info.get(START_LEASES, {})
    return leases.get(kind)


def stamp(session: Session, row: OutboxMessage, now: datetime) -> None:
    """Stamp ``row`` published at ``now``, with its start lease from then when its kind has one
    (``Move.PUBLISH``; a kind without a start lease keeps the one it has)."""
    row.dispatched_at = now
    lease = start_lease(session, row.kind)
    if lease is not None:
        row.start_lease_until = now + timedelta(seconds=lease)


def unsent(row: OutboxMessage) -> bool:
    """A new row the hook stamps before its INSERT: not stamped, not due later, not parked (a
    queued submission waits unpublished)."""
    return row.dispatched_at is None and row.next_attempt_at is None and row.parked_reason is None


def stamp_new(session: Session, row: OutboxMessage, now: datetime | None = None) -> None:
    """A new row about to be inserted: stamped at its creation (or ``now``) when it goes out at
    commit, as the hook's flush listener stamps one before its flush."""
    if unsent(row):
        stamp(session, row, row.created_at or now or utcnow())


def stamp_unflushed(session: Session, row: OutboxMessage) -> None:
    """A new row about to be inserted outside the unit of work (``models.store.postgres_rows``):
    stamped as :func:`stamp_new`, when this session publishes at all."""
    if session.info.get(INSTALLED):
        stamp_new(session, row)


def note(session: Session, rows: Iterable[OutboxMessage]) -> None:
    """Publish ``rows`` at the outermost commit (``models.publishing``)."""
    session.info.setdefault(PENDING, []).extend(rows)


def note_inserted(session: Session, row: OutboxMessage) -> None:
    """That row, inserted outside the unit of work: published at commit as a flushed one is."""
    if session.info.get(INSTALLED) and row.parked_reason is None:
        note(session, [row])


def pending(session: Session) -> list[OutboxMessage]:
    """What this session will publish at commit, so far (each row once)."""
    seen: dict[int, OutboxMessage] = {}
    for row in session.info.get(PENDING, ()):
        seen.setdefault(id(row), row)
    return list(seen.values())


def forget(session: Session) -> None:
    """Nothing noted any more (the transaction ended)."""
    session.info.pop(PENDING, None)
