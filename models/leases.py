"""Named leases for beat work that must not run twice at once but cannot hold a transaction (and
so a row lock) open while it runs: reconciliation spends minutes calling a vendor, and two runs
side by side would each pace themselves to the vendor's rate limit and together exceed it.

A lease is a row with an expiry, taken and released in short transactions, so it works the same
on PostgreSQL and SQLite. A holder that dies leaves the row to expire; nothing waits on it. The
slots of a semaphore (a relay's) are leases too, named here (``slot_names``, ``slot_rounds``).
This module holds the table and the names; the statements that take and give leases back are the
store's (``models.store.slots``: ``store_of(session).slots``, and ``lease``/``acquire``/``release``
for work that takes one in a transaction of its own).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UtcDateTime


class Lease(Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


def slot_names(group: str, slots: int) -> list[str]:
    """The lease names of a counting semaphore: ``slots`` leases named after ``group``."""
    return [f"{group}:{i}" for i in range(slots)]


def slot_rounds(groups: Sequence[tuple[str, int]], first: Sequence[int] | None = None) -> list[list[str]]:
    """Each group's slot names from a random one (or ``first``) round: the order they are tried in
    (the store's ``slots.take``, ``models.store.slots``, takes one of each)."""
    return [slot_round(group, slots, None if first is None else first[n]) for n, (group, slots) in enumerate(groups)]


def slot_round(group: str, slots: int, first: int | None) -> list[str]:
    """The group's slot names from a random one (or ``first``) round."""
    names = slot_names(group, slots)
    start = _rng.randrange(slots) if first is None else first
    return names[start:] + names[:start]


def slot_number(name: str) -> int:
    """A slot's place in its group (``relay:client:7:3`` → 3)."""
    return int(name.rsplit(":", 1)[1])


_rng = random.SystemRandom()
