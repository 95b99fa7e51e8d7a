"""The order of a task's callbacks, as plain rules. Pure: no database, no I/O.

Every callback (relay) of a task gets the next number of the task's own sequence, 1, 2, 3 …, when
the event that causes it is applied under the task's row lock. A relay may be delivered only once
no earlier relay of its task is still on its way: one queued, retrying, in flight or itself waiting.
An earlier relay that will not be delivered (dead-lettered, or parked behind a disabled endpoint)
no longer holds the later ones: they go ahead, and the skipped
sequence is a *gap* the task's timeline records. Tasks never wait on each other: only relays of
the same task are compared.

``models`` keeps these rules in SQL (``service.ordering``); ``tests/unit/test_ordering.py`` checks
them here over every arrival order hypothesis can think of.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class RelayStatus(StrEnum):
    PENDING = "pending"  # queued, in flight or waiting for a retry
    WAITING = "waiting"  # held back until an earlier relay of its task is settled
    DELIVERED = "delivered"
    DEAD_LETTERED = "dead_lettered"
    PARKED = "parked"  # its endpoint is disabled (410 Gone): waits for a person, holds nothing


#: Relays that hold every later relay of their task.
HOLDING: frozenset[RelayStatus] = frozenset({RelayStatus.PENDING, RelayStatus.WAITING})
#: Relays that will not be delivered (unless replayed or released): the later ones pass them.
GAPS: frozenset[RelayStatus] = frozenset({RelayStatus.DEAD_LETTERED, RelayStatus.PARKED})


@dataclass(frozen=True)
class Relay:
    sequence: int
    status: RelayStatus


def next_sequence(last: int) -> int:
    """The sequence of a task's next callback; ``last`` is the task's counter (0 before the first)."""
    if last < 0:
        raise ValueError("a task's callback counter is never negative")
    return last + 1


def held_by(sequence: int, others: Iterable[Relay]) -> int | None:
    """The relay that ``sequence`` must wait for: the latest earlier one still holding, or None.

    The latest, not the earliest: a chain of waiting relays is released one link at a time, each
    by the one right before it.
    """
    holding = [r.sequence for r in others if r.sequence < sequence and r.status in HOLDING]
    return max(holding, default=None)


def may_deliver(sequence: int, others: Iterable[Relay]) -> bool:
    return held_by(sequence, others) is None


def skipped(sequence: int, others: Iterable[Relay]) -> list[int]:
    """The earlier sequences that ``sequence`` goes ahead of without them being delivered."""
    return sorted(r.sequence for r in others if r.sequence < sequence and r.status in GAPS)


@dataclass(frozen=True)
class PendingProgress:
    """The task's latest progress relay not delivered yet, as the coalescing rule sees it."""

    sequence: int
    attempted: bool  # a delivery started or was tried: its webhook-id may have reached the app
    done: bool


def coalesces_into(pending: PendingProgress | None, last_sequence: int) -> bool:
    """May a new progress report replace the content of ``pending`` instead of adding a relay?

    Only a relay never sent (a retry must repeat what its webhook-id first carried, or a domain app
    deduplicating on it would drop the newer figure) and still the task's latest callback (else the
    newer progress would be delivered ahead of a callback that came before it). Latest wins.
    """
    return pending is not None and not pending.done and not pending.attempted and pending.sequence == last_sequence
