"""Pure: which waiting submissions go to the broker next (fair dispatch, issue 20).

A client's tasks wait in the database, not in the broker: each client has at most ``window ×
weight`` submissions of one provider on their way (released to the broker, not yet at the vendor),
so a backlog of thousands never stands in front of another tenant's task in the queue. Three rules
decide what is released when there is room:

- **Priority, within a client.** A task ranks at its creation time plus ``(priority − 1) ×
  aging_s``: priority 1 overtakes the client's queued priority-3 work, and a priority-5 task is
  overtaken only by tasks created less than ``4 × aging_s`` after it, so it never starves (aging).
  Priority orders a client's own work; it buys no share of anyone else's.
- **Weighted fairness, across clients**, where they share a vendor's capacity
  (``LIAISON_PROVIDER_<NAME>_MAX_IN_FLIGHT``): each free slot goes to the client with the fewest jobs
  open at that vendor per unit of weight (ties: the longest-waiting task first), so the capacity is
  shared in proportion to weight, whatever each client's backlog.
- **Concurrency keys.** At most ``key_limit`` tasks of one client and key are open at the vendor at
  once; a later task with that key waits, in rank order, and lets the others of its client pass.
- **No slot idles while a task may go** (issue 44): a client whose queued tasks are all held by their
  keys cannot use the slots it is granted; :func:`fill` hands what it could not use on, in the same
  fair order, to the clients that can, so a capped vendor is never left idle while another tenant
  waits behind a backlog that is only blocked by its own key.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = 1, 5, 3

#: Why a task waits in ``requested`` before it is released (the API's ``waiting.reason``).
VENDOR_CAPACITY = "vendor_capacity"
CONCURRENCY_KEY = "concurrency_key"
CLIENT_BACKLOG = "client_backlog"  # the client's own earlier (or more urgent) work goes first
RATE_LIMIT = "rate_limit"  # released, and waiting for a slot of the vendor's shared rate limit
REASONS = {
    VENDOR_CAPACITY: "waiting for vendor capacity",
    CONCURRENCY_KEY: "waiting for an earlier task with the same concurrency key",
    CLIENT_BACKLOG: "waiting behind the client's earlier or more urgent tasks",
    RATE_LIMIT: "waiting for the vendor's rate limit",
}
#: Why a task's callbacks wait (the API's ``callbacks_waiting.reason``).
ENDPOINT_PAUSED = "endpoint_paused"


@dataclass(frozen=True)
class DispatchPolicy:
    window: int = 16  # one client's submissions of one provider on their way at once, × its weight
    aging_s: float = 60.0  # one priority level is worth this much waiting
    caps: Mapping[str, int] = field(default_factory=dict)  # provider → jobs open at the vendor at most

    def __post_init__(self) -> None:
        if self.window < 1 or self.aging_s <= 0 or any(cap < 1 for cap in self.caps.values()):
            raise ValueError("dispatch policy needs window>=1, aging_s>0 and caps>=1")

    def cap(self, provider: str) -> int | None:
        return self.caps.get(provider)


def rank(created_at: datetime, priority: int, aging_s: float) -> datetime:
    """The moment a task ranks at: its creation, later by one ``aging_s`` per priority level below 1."""
    return created_at + timedelta(seconds=(priority - MIN_PRIORITY) * aging_s)


@dataclass(frozen=True)
class Candidate:
    """One client with tasks waiting for one provider, as the release sees it."""

    client_id: int
    weight: int
    open_jobs: int  # released and not final, at this provider (what a vendor cap counts)
    on_the_way: int  # released and still ``requested``: what the client's window counts
    waiting: int  # queued tasks
    first_rank: datetime  # the rank of its most urgent queued task
    #: how many of its queued tasks may go now (their keys let them), when known; None: as many as wait
    ready: int | None = None


def window_room(candidate: Candidate, window: int) -> int:
    return max(0, window * max(candidate.weight, 1) - candidate.on_the_way)


def can_take(candidate: Candidate, window: int) -> int:
    """The most a client can be granted: its window's room, its waiting tasks, those that may go."""
    most = min(candidate.waiting, window_room(candidate, window))
    return most if candidate.ready is None else min(most, max(candidate.ready, 0))


def plan(candidates: list[Candidate], room: int | None, window: int) -> dict[int, int]:
    """How many tasks to release per client: within each one's window, its waiting tasks and those
    that may go (``ready``), and in all at most ``room`` (a vendor's free capacity; None: no cap),
    each free slot going to the client with the fewest open jobs per unit of weight."""
    granted = {c.client_id: 0 for c in candidates}
    if room is None:  # no shared capacity to divide: each client fills its own window
        for c in candidates:
            granted[c.client_id] = can_take(c, window)
        return granted
    for _ in range(max(room, 0)):
        eligible = [c for c in candidates if granted[c.client_id] < can_take(c, window)]
        if not eligible:
            break
        best = min(
            eligible,
            key=lambda c: ((c.open_jobs + granted[c.client_id]) / max(c.weight, 1), c.first_rank, c.client_id),
        )
        granted[best.client_id] += 1
    return granted


def fill(candidates: list[Candidate], room: int | None, window: int, take: Callable[[int, int], int]) -> dict[int, int]:
    """:func:`plan`, with the slots a client cannot use handed on to the next in fair order.

    ``take(client_id, n)`` finds how many of the client's first ``n`` queued tasks may go now (at
    most ``n``: fewer when their concurrency keys hold the rest back), as the caller's query finds
    them. A client that comes short is known from then on to have only that many ready, and the
    plan is made again over what can actually go, until every grant is met: so no slot of the
    vendor stays idle while any client has a task that may go, and the slots are still shared by
    fewest open jobs per weight among the clients that can use them. Each client is asked again
    only for a larger ``n`` (the first ones it found stay the first, in rank order); every round
    but the last finds a client short, so there are at most one more rounds than clients."""
    ready: dict[int, int] = {}
    found: dict[int, int] = {}
    while True:
        granted = plan([replace(c, ready=ready.get(c.client_id, c.ready)) for c in candidates], room, window)
        asks = [(cid, n) for cid, n in granted.items() if n > found.get(cid, 0) and cid not in ready]
        if not asks:
            # a plan made over fewer ready tasks never grants a client more than it found
            return {cid: min(n, found.get(cid, 0)) for cid, n in granted.items()}
        for cid, n in asks:
            got = max(0, min(take(cid, n), n))
            found[cid] = got
            if got < n:
                ready[cid] = got


def first_free(
    ranked: list[tuple[int, str | None]], open_by_key: Mapping[str, int], key_limit: int, wanted: int
) -> list[int]:
    """Of a client's queued tasks in rank order (id, concurrency key), the first ``wanted`` that
    their key lets go (each released one counts against its key at once)."""
    taken: list[int] = []
    counts = dict(open_by_key)
    for task_id, key in ranked:
        if len(taken) >= wanted:
            break
        if key is not None:
            if counts.get(key, 0) >= key_limit:
                continue
            counts[key] = counts.get(key, 0) + 1
        taken.append(task_id)
    return taken
