"""Slots and leases: the semaphores every process shares through the database (``models.leases``:
a slot is a ``leases`` row with an expiry), taken here where the two databases differ.

A relay takes one slot of its client's group and one of its callback origin's, in that order
(``models.leases.slot_rounds``). On PostgreSQL both first tries go in one statement (a
data-modifying ``WITH``: the second slot is inserted only from the first's ``RETURNING``, so it is
tried only once the first is held, as the one-by-one order has it), and a relay's start is counted
in that statement too when both were free. SQLite has no INSERT inside a ``WITH``: each slot is
tried in a statement of its own (``models.leases.take_rounds``), and the relay's start is counted
by its flush. A group whose first try was held goes round its slots the one-by-one way on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from models.base import UtcDateTime, upsert
from models.leases import give_back, slot_rounds, take_rounds
from models.messages import OutboxMessage

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

    def give_back(self, session: Session, names: str | list[str], holder: str) -> None:
        """Give ``holder``'s slots back in the caller's transaction (``models.leases.give_back``)."""
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
