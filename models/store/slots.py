"""Slots and leases: the semaphores every process shares through the database (``models.leases``:
a slot is a ``leases`` row with an expiry), taken here where the two databases differ.

A relay takes one slot of its client's group and one of its callback origin's, in that order
(``models.leases.slot_rounds``). On PostgreSQL both first tries go in one statement (a
data-modifying ``WITH``: the second slot is inserted only from the first's ``RETURNING``, so it is
tried only once the first is held, as the one-by-one order has it), and a relay's start is counted
in that statement too when both were free. SQLite has no INSERT inside a ``WITH``: each slot is
tried in a statement of its own (``take_rounds``), and the relay's start is counted
by its flush. A group whose first try was held goes round its slots the one-by-one way on both.

A named lease (beat work that must not run twice at once: ``lease``, ``acquire``, ``release``, each
in a transaction of its own) is one upsert, and a slot given back one ``DELETE``, alike on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Delete, Table, bindparam, delete, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from models.base import UtcDateTime, upsert
from models.leases import Lease, slot_number, slot_round, slot_rounds
from models.messages import OutboxMessage

if TYPE_CHECKING:  # models.db builds the store: no import of it at run time
    from models.db import Database

#: a relay's groups: ``(group, slots)`` each, in the order every taker tries them
Groups = Sequence[tuple[str, int]]


class Slots:
    """The verbs both databases answer; a first try of two groups is each database's own."""

    def take(
        self,
        session: Session,
        groups: Groups,
        holder: str,
        now: datetime,
        ttl_s: float,
        first: Sequence[int] | None = None,
    ) -> list[str] | None:
        """One slot of each ``(group, slots)``, taken in the order given (a relay: its client's, then
        its endpoint's), in the caller's transaction; None when a group has none free: the caller
        rolls back, and with it the slots taken before. Every taker tries the groups in one order,
        so none waits for a slot of an earlier group while holding one of a later group (no
        lock-order deadlock). ``first``: each group's first slot tried (tests; else a random one)."""
        rounds = slot_rounds(groups, first)
        return take_rounds(session, rounds, holder, now, ttl_s, self._both_first(session, rounds, holder, now, ttl_s))

    def take_for_delivery(
        self,
        session: Session,
        row: OutboxMessage,
        groups: Groups,
        holder: str,
        now: datetime,
        ttl_s: float,
        target: str,
        lease_until: datetime | None,
        first: Sequence[int] | None = None,
    ) -> tuple[list[str] | None, bool]:
        """A relay's slots (:meth:`take`) and whether its delivery's start was counted with them
        (``deliveries + 1``, ``target`` and the start lease written, the row's object given the
        values as written); False: the caller counts it (``service.dead_letters.count_delivery``)."""
        return self.take(session, groups, holder, now, ttl_s, first), False

    def take_slot(
        self,
        session: Session,
        group: str,
        slots: int,
        holder: str,
        now: datetime,
        ttl_s: float,
        first: int | None = None,
    ) -> str | None:
        """Take one of ``slots`` leases of ``group`` (a semaphore shared by every process that reaches
        the database), in the caller's transaction: the name taken, or None when all are held. Give it
        back with :meth:`give_back` (or :func:`release`).

        A slot given back is a deleted row, so a free slot is usually a missing one: each is tried with
        ``INSERT … ON CONFLICT DO NOTHING``, which leaves a held row unlocked, from a random slot round
        (``first``, for tests), so a taker finds a free slot at the first try while most are free. Only
        when every slot has a row are the expired ones (a holder that died) taken over, with the locking
        upsert, in slot order. (Tried with the locking upsert from a random slot, takers kept the locks of
        the held rows they had tried, in different orders, and deadlocked: ``bin/chaos``; tried with it
        from slot 0, a taker paid one statement for every holder before the first free slot.)"""
        names = slot_round(group, slots, first)
        return _take_from(session, names, names, holder, now, ttl_s)

    def take_lease(self, session: Session, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
        """Take the lease ``name``, in the caller's transaction, unless someone else holds it unexpired
        (:func:`take_lease`)."""
        return take_lease(session, name, holder, now, ttl_s)

    def give_back(self, session: Session, names: str | list[str], holder: str) -> None:
        """Give ``holder``'s slots back in the caller's transaction (:func:`give_back`)."""
        give_back(session, names, holder)

    def _both_first(
        self, session: Session, rounds: list[list[str]], holder: str, now: datetime, ttl_s: float
    ) -> set[str] | None:
        """The names taken by one statement trying two rounds' first slots; None: not tried."""
        return None


class SqliteSlots(Slots):
    """One statement per slot tried (no INSERT inside a ``WITH``)."""


class PostgresSlots(Slots):
    """Two groups' first tries in one statement, and a relay's start counted in it when both were free."""

    def _both_first(
        self, session: Session, rounds: list[list[str]], holder: str, now: datetime, ttl_s: float
    ) -> set[str] | None:
        if len(rounds) != 2:
            return None
        return set(session.scalars(_TAKE_BOTH_FIRST, _first_tries(rounds, holder, now, ttl_s)))

    def take_for_delivery(
        self,
        session: Session,
        row: OutboxMessage,
        groups: Groups,
        holder: str,
        now: datetime,
        ttl_s: float,
        target: str,
        lease_until: datetime | None,
        first: Sequence[int] | None = None,
    ) -> tuple[list[str] | None, bool]:
        """When the first try finds both of its two slots free (the usual case), the same statement
        counts the start and writes the row's ``target`` and start lease: one round trip where the
        start's flush would send an ``UPDATE`` of its own. Otherwise (a slot held, one group) the
        caller counts as before."""
        rounds = slot_rounds(groups, first)
        if len(rounds) != 2:
            return take_rounds(session, rounds, holder, now, ttl_s, None), False
        params = _first_tries(rounds, holder, now, ttl_s) | {
            "outbox_id": row.id,
            "relay_target": target,
            "lease_until": lease_until,
        }
        got: set[str] = set()
        deliveries: int | None = None
        for name, counted in session.execute(_TAKE_BOTH_FIRST_AND_START, params):
            if name is not None:
                got.add(name)
            else:
                deliveries = counted
        if deliveries is not None:
            set_committed_value(row, "deliveries", deliveries)
            set_committed_value(row, "target", target)
            set_committed_value(row, "start_lease_until", lease_until)
        return take_rounds(session, rounds, holder, now, ttl_s, got), deliveries is not None


def _first_tries(rounds: list[list[str]], holder: str, now: datetime, ttl_s: float) -> dict[str, Any]:
    """The parameters of :data:`_BOTH_FIRST`: the first slot of each of two rounds."""
    (one, *_), (two, *_) = rounds
    return {"one": one, "two": two, "holder": holder, "expires_at": now + timedelta(seconds=ttl_s)}


#: PostgreSQL only (SQLite has no INSERT inside WITH): the second slot is inserted from the first's
#: RETURNING, so it is tried only once the first is held, as the one-by-one order has it. ``one``
#: and ``two`` are the names inserted; a statement of its own may add what goes with both.
_BOTH_FIRST = (
    "one AS (INSERT INTO leases (name, holder, expires_at) VALUES (:one, :holder, :expires_at)"
    " ON CONFLICT (name) DO NOTHING RETURNING name),"
    " two AS (INSERT INTO leases (name, holder, expires_at) SELECT :two, :holder, :expires_at FROM one"
    " ON CONFLICT (name) DO NOTHING RETURNING name)"
)
_TAKE_BOTH_FIRST = upsert(
    f"WITH {_BOTH_FIRST} SELECT name FROM one UNION ALL SELECT name FROM two",
    expires_at=UtcDateTime(),
)
#: and a relay's start counted (``deliveries + 1``, its target, its start lease) only when both
#: slots were inserted (``two`` has a row only then)
_TAKE_BOTH_FIRST_AND_START = upsert(
    f"WITH {_BOTH_FIRST}, counted AS (UPDATE outbox_messages SET deliveries = deliveries + 1, target = :relay_target,"
    " start_lease_until = :lease_until"
    " WHERE id = :outbox_id AND EXISTS (SELECT 1 FROM two) RETURNING deliveries)"
    " SELECT name, NULL::integer AS deliveries FROM one UNION ALL SELECT name, NULL FROM two"
    " UNION ALL SELECT NULL, deliveries FROM counted",
    expires_at=UtcDateTime(),
    lease_until=UtcDateTime(),
)


def take_lease(session: Session, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
    """Take the lease, in the caller's transaction, unless someone else holds it unexpired.

    One statement: an upsert that writes only when the row is missing, expired or already ours,
    and returns the row it wrote. Two takers of one name meet at its primary key; the second waits
    for the first to commit, sees the row it left, and takes nothing.
    """
    params = {"name": name, "holder": holder, "now": now, "expires_at": now + timedelta(seconds=ttl_s)}
    return session.execute(_TAKE, params).first() is not None


def take_rounds(
    session: Session, rounds: list[list[str]], holder: str, now: datetime, ttl_s: float, got: set[str] | None
) -> list[str] | None:
    """One slot of each round, in the order given, or None when a round has none free (``Slots.take``
    after its first try: ``got``, the names one statement inserted of two rounds' first slots on
    PostgreSQL; None: nothing tried yet)."""
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


def _take_from(
    session: Session, untried: list[str], names: list[str], holder: str, now: datetime, ttl_s: float
) -> str | None:
    """A free slot among ``untried``, in that order; else an expired one among all ``names``."""
    expires_at = now + timedelta(seconds=ttl_s)
    for name in untried:
        if session.execute(_CLAIM_FREE, {"name": name, "holder": holder, "expires_at": expires_at}).first():
            return name
    expired = session.scalars(_EXPIRED, {"names": names, "now": now})
    for name in sorted(expired, key=slot_number):  # in slot order, as every taker goes
        if take_lease(session, name, holder, now, ttl_s):
            return name
    return None


def give_back_statement() -> Delete:
    """:func:`give_back`'s statement (bound ``names``, ``holder``), for a caller that sends it as a
    ``WITH`` of a statement of its own (a relay's record on PostgreSQL: ``models.store.outbox``)."""
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


def acquire(db: Database, name: str, holder: str, now: datetime, ttl_s: float) -> bool:
    """Take the lease in a transaction of its own (see :func:`take_lease`)."""
    with db.transaction() as session:
        return take_lease(session, name, holder, now, ttl_s)


def release(db: Database, name: str | list[str], holder: str) -> None:
    """Give the lease back in a transaction of its own (see :func:`give_back`)."""
    with db.transaction() as session:
        give_back(session, name, holder)


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


_TAKE = upsert(
    "INSERT INTO leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)"
    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at"
    " WHERE leases.expires_at <= :now OR leases.holder = excluded.holder"
    " RETURNING name",
    now=UtcDateTime(),
    expires_at=UtcDateTime(),
)
_CLAIM_FREE = upsert(
    "INSERT INTO leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)"
    " ON CONFLICT (name) DO NOTHING RETURNING name",
    expires_at=UtcDateTime(),
)
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
