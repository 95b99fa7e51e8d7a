"""Pure: the rate-limit arithmetic (GCRA, the "generic cell rate algorithm" — a token bucket kept as
one number). The storage (Redis, the database) keeps that one number per key and applies this
function atomically; ``now`` is an argument (the storage's clock, read once it holds the key, or a
test's) and the caller does any sleeping, so tests need neither. Arrivals must come in order: a
``now`` older than ``tat - burst * interval`` is refused, however quiet its client.

State is the *theoretical arrival time* ``tat``: when the bucket would be full again. With
``interval = 1 / rate``, a call at ``now`` conforms once ``max(tat, now) + interval - burst *
interval <= now``. Granted calls move ``tat`` on by one interval; refused ones leave it alone, so a
refused caller costs the others nothing.

``max_wait_s`` lets a caller *reserve* a slot a little in the future (reconcile and workers sleep
until it instead of giving the slot up); a call whose slot is further away than that is refused with
``retry_after_s``, the time after which asking again can succeed.

Guarantee (tested with hypothesis): over any window of length ``w``, the slots granted number at most
``rate * w + burst``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Slack for float rounding: epoch seconds as doubles are exact to ~0.24 µs, so a slot "due now"
#: can compute as a hair in the future. A microsecond grants nothing measurable early.
EPSILON_S = 1e-6


@dataclass(frozen=True)
class Limit:
    """``rate_per_s`` sustained, up to ``burst`` at once after a quiet spell."""

    rate_per_s: float
    burst: int = 1

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)) or self.burst < 1:
            raise ValueError("rate_per_s must be a positive finite number and burst at least 1")

    @property
    def interval_s(self) -> float:
        return 1.0 / self.rate_per_s


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: allowed: seconds to wait before making the call (0: now). Refused: 0.
    wait_s: float = 0.0
    #: refused: seconds after which asking again can be granted (> 0). Allowed: 0.
    retry_after_s: float = 0.0


def gcra(tat: float | None, now: float, limit: Limit, max_wait_s: float = 0.0) -> tuple[float | None, Decision]:
    """One request for one slot. Returns the new state (unchanged when refused) and the decision."""
    interval = limit.interval_s
    new_tat = max(tat if tat is not None else now, now) + interval
    slot = new_tat - limit.burst * interval  # the earliest moment this call conforms
    wait = slot - now
    if wait <= EPSILON_S:
        wait = 0.0
    if wait <= max(max_wait_s, 0.0):
        return new_tat, Decision(True, wait_s=wait)
    return tat, Decision(False, retry_after_s=wait - max(max_wait_s, 0.0))


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` in whole seconds, at least 1 (0 would invite an immediate, refused retry)."""
    return str(max(1, math.ceil(seconds)))
