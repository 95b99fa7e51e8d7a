"""When beat counts as stale: pure arithmetic over its last tick, apart from where that is stored.

Beat wakes at least every ``min(shortest schedule interval, max loop interval)`` seconds (Celery's
scheduler sleeps until the next entry is due, never longer than its max interval), so a beat that
has not ticked for three of those has missed at least two wake-ups: it is dead, wedged or cut off
from the database, not merely slow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

#: how many expected wake-ups may pass without a tick before beat is stale
STALE_AFTER_TICKS = 3


def expected_interval_s(schedule_intervals_s: Iterable[float], max_interval_s: float) -> float:
    """The longest beat should ever sleep between ticks: its shortest entry, or its max interval."""
    return min([*schedule_intervals_s, max_interval_s])


@dataclass(frozen=True)
class BeatLiveness:
    """What ``/readyz``, ``/metrics`` and ``liaison beat check`` say about beat."""

    last_tick_at: datetime | None
    interval_s: float | None
    age_s: float | None
    stale_after_s: float | None
    stale: bool

    def describe(self) -> str:
        if self.last_tick_at is None:
            return "beat has never ticked (is it running?)"
        state = "stale" if self.stale else "ticking"
        return f"beat {state}: last tick {self.age_s:.0f}s ago (stale after {self.stale_after_s:.0f}s)"

    def as_dict(self) -> dict[str, object]:
        return {
            "last_tick_at": self.last_tick_at.isoformat() if self.last_tick_at else None,
            "age_s": round(self.age_s, 3) if self.age_s is not None else None,
            "stale_after_s": self.stale_after_s,
            "stale": self.stale,
        }


def liveness(last_tick_at: datetime | None, interval_s: float | None, now: datetime) -> BeatLiveness:
    """Stale once the last tick is more than STALE_AFTER_TICKS expected intervals old; a beat that
    never ticked is stale too (nothing says it runs)."""
    if last_tick_at is None or interval_s is None:
        return BeatLiveness(None, None, None, None, True)
    age = max((now - last_tick_at).total_seconds(), 0.0)
    stale_after = STALE_AFTER_TICKS * interval_s
    return BeatLiveness(last_tick_at, interval_s, age, stale_after, age > stale_after)
