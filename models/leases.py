"""Named leases for beat work that must not run twice at once but cannot hold a transaction (and
so a row lock) open while it runs: reconciliation spends minutes calling a vendor, and two runs
side by side would each pace themselves to the vendor's rate limit and together exceed it.

A lease is a row with an expiry, taken and released in short transactions, so it works the same
on PostgreSQL and SQLite. A holder that dies leaves the row to expire; nothing waits on it. The
slots of a semaphore (a relay's) are leases too, taken one of each group by the store
(``models.store.slots``: in one statement on PostgreSQL while the first tries are free) with this
module's one-by-one rounds.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Delete, String, Table, bindparam, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from models.base import Base, UtcDateTime, upsert

if TYPE_CHECKING:  # the store (imported by models.db) uses the slots: no import of models.db at run time
    from models.db import Database


class Lease(Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


def acquire(db: Database, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
    """Take the lease in a transaction of its own (see :func:`take`)."""
    with db.transaction() as session:
        return take(session, name, holder, now, ttl_s)


def take(session: Session, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
    """Take the lease, in the caller's transaction, unless someone else holds it unexpired.

    One statement: an upsert that writes only when the row is missing, expired or already ours,
    and returns the row it wrote. Two takers of one name meet at its primary key; the second waits
    for the first to commit, sees the row it left, and takes nothing.
    """
    params = {"name": name, "holder": holder, "now": now, "expires_at": now + timedelta(seconds=ttl_s)}
    return session.execute(_TAKE, params).first() is not None


_TAKE = upsert(
    "INSERT INTO leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at"
    " WHERE leases.expires_at <= :now OR leases.holder = excluded.holder"
    " RETURNING name",
    now=UtcDateTime(),
    expires_at=UtcDateTime(),
)


def slot_names(group: str, slots: int) -> list[str]:
    """The lease names of a counting semaphore: ``slots`` leases named after ``group``."""
    return [f"{group}:{i}" for i in range(slots)]


def take_slot(
    session: Session, group: str, slots: int, holder: str, now: datetime, ttl_s: float, first: int | None = None
) -> str | None:
    """Take one of ``slots`` leases of ``group`` (a semaphore shared by every process that reaches
    the database), in the caller's transaction: the name taken, or None when all are held. Give it
    back with :func:`release` or :func:`give_back`.

    A slot given back is a deleted row, so a free slot is usually a missing one: each is tried with
    ``INSERT … ON CONFLICT DO NOTHING``, which leaves a held row unlocked, from a random slot round
    (``first``, for tests), so a taker finds a free slot at the first try while most are free. Only
    when every slot has a row are the expired ones (a holder that died) taken over, with the locking
    upsert, in slot order. (Tried with the locking upsert from a random slot, takers kept the locks of
    the held rows they had tried, in different orders, and deadlocked: ``bin/chaos``; tried with it
    from slot 0, a taker paid one statement for every holder before the first free slot.)"""
    names = _round(group, slots, first)
    return _take_from(session, names, names, holder, now, ttl_s)


def slot_rounds(groups: Sequence[tuple[str, int]], first: Sequence[int] | None = None) -> list[list[str]]:
    """Each group's slot names from a random one (or ``first``) round: the order they are tried in
    (the store's ``slots.take``, ``models.store.slots``, takes one of each)."""
    return [_round(group, slots, None if first is None else first[n]) for n, (group, slots) in enumerate(groups)]


def take_rounds(
    session: Session, rounds: list[list[str]], holder: str, now: datetime, ttl_s: float, got: set[str] | None
) -> list[str] | None:
    """One slot of each round, in the order given, or None when a round has none free (the store's
    ``slots.take``, ``models.store.slots``, after its first try: ``got``, the names one statement
    inserted of two rounds' first slots on PostgreSQL; None: nothing tried yet)."""
    taken: list[str] = []
    tried: set[str] = set()
    if got is not None:
        (one, *_), (two, *_) = rounds
        if one in got:
            taken.append(one)
            tried.add(two)
            if two in got:
                return [one, two]
        else:
            tried.add(one)
    for names in rounds[len(taken) :]:
        slot = _take_from(session, [name for name in names if name not in tried], names, holder, now, ttl_s)
        if slot is None:
            return None
        taken.append(slot)
    return taken


def _round(group: str, slots: int, first: int | None) -> list[str]:
    """The group's slot names from a random one (or ``first``) round."""
    names = slot_names(group, slots)
    start = _rng.randrange(slots) if first is None else first
    return names[start:] + names[:start]


def _take_from(
    session: Session, untried: list[str], names: list[str], holder: str, now: datetime, ttl_s: float
) -> str | None:
    """A free slot among ``untried``, in that order; else an expired one among all ``names``."""
    expires_at = now + timedelta(seconds=ttl_s)
    for name in untried:
        if session.execute(_CLAIM_FREE, {"name": name, "holder": holder, "expires_at": expires_at}).first():
            return name
    expired = session.scalars(_EXPIRED, {"names": names, "now": now})
    for name in sorted(expired, key=_slot_number):  # in slot order, as every taker goes
        if take(session, name, holder, now, ttl_s):
            return name
    return None


def _slot_number(name: str) -> int:
    return int(name.rsplit(":", 1)[1])


_rng = random.SystemRandom()
_CLAIM_FREE = upsert(
    "INSERT INTO leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)"
    " ON CONFLICT (name) DO NOTHING RETURNING name",
    expires_at=UtcDateTime(),
)


def release(db: Database, name: str | list[str], holder: str) -> None:
    """Give the lease back in a transaction of its own (see :func:`give_back`)."""
    with db.transaction() as session:
        give_back(session, name, holder)


def give_back_statement() -> Delete:
    """:func:`give_back`'s statement (bound ``names``, ``holder``), for a caller that sends it as a
    ``WITH`` of a statement of its own (a relay's record on PostgreSQL: ``service.claims``)."""
    return _GIVE_BACK


def give_back(session: Session, name: str | list[str], holder: str) -> None:
    """Give the lease (or several of one holder: a relay's client and endpoint slots) back in the
    caller's transaction, deleting the rows (their expiry may be in a ``now`` a test moved forward).

    One statement, which locks the rows in name order before it deletes them: the order takers go
    through a relay's groups (``relay:client:…`` before ``relay:endpoint:…``). A taker waits for a
    row being given back, and one taking over an expired slot locks it; given back in another order,
    a holder's give-back and such a taker could each wait for the other (PostgreSQL reported that
    deadlock once, under a drained backlog, when a plain ``DELETE … IN`` visited the rows as they
    lay)."""
    names = [name] if isinstance(name, str) else name
    if names:
        session.execute(_GIVE_BACK, {"names": names, "holder": holder})


#: A Core statement on the table: an ORM-enabled delete would match the session's loaded objects
#: against its criteria first, on every relay.
_LEASES = Lease.__table__
assert isinstance(_LEASES, Table)
_EXPIRED = select(_LEASES.c.name).where(
    _LEASES.c.name.in_(bindparam("names", expanding=True)),
    _LEASES.c.expires_at <= bindparam("now", type_=UtcDateTime()),
)
_GIVE_BACK = delete(_LEASES).where(
    _LEASES.c.name.in_(
        select(_LEASES.c.name)
        .where(_LEASES.c.name.in_(bindparam("names", expanding=True)), _LEASES.c.holder == bindparam("holder"))
        .order_by(_LEASES.c.name)
        .with_for_update()  # PostgreSQL locks them in that order; SQLite serialises writers anyway
    )
)


@contextmanager
def lease(db: Database, name: str, now: datetime, ttl_s: float) -> Iterator[bool]:
    """``with lease(db, "reconcile:sim", now, 300) as held:`` — run the body's work only if held."""
    holder = uuid.uuid4().hex
    held = acquire(db, name, holder, now, ttl_s)
    try:
        yield held
    finally:
        if held:
            release(db, name, holder)
