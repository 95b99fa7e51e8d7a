"""Beat staleness (core.beat_liveness) and the interval it is measured against (beat_schedule.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from beat_schedule import BEAT_SCHEDULE
from core.beat_liveness import STALE_AFTER_TICKS, expected_interval_s, liveness

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_deploy_default_is_stale_after_three_times_the_shortest_schedule_interval() -> None:
    intervals = [cast(timedelta, entry["schedule"]).total_seconds() for entry in BEAT_SCHEDULE.values()]
    shortest = min(intervals)  # the outbox sweep's 30 s, or a shorter job's
    assert shortest <= 30.0
    assert expected_interval_s(intervals, 300.0) == shortest  # Celery's max loop interval is 300 s
    assert liveness(NOW - timedelta(seconds=3 * shortest), shortest, NOW).stale is False
    assert liveness(NOW - timedelta(seconds=3 * shortest + 0.5), shortest, NOW).stale is True


def test_a_shorter_max_interval_wins() -> None:
    assert expected_interval_s([30.0, 60.0], 1.0) == 1.0


def test_a_beat_that_never_ticked_is_stale() -> None:
    state = liveness(None, None, NOW)
    assert state.stale and state.as_dict()["last_tick_at"] is None
    assert "never ticked" in state.describe()


@given(age=st.floats(0, 10_000), interval=st.floats(0.1, 3600))
def test_stale_exactly_when_older_than_three_intervals(age: float, interval: float) -> None:
    state = liveness(NOW - timedelta(seconds=age), interval, NOW)
    assert state.age_s is not None  # it ticked
    assert state.stale == (state.age_s > STALE_AFTER_TICKS * interval)
    assert state.stale_after_s == STALE_AFTER_TICKS * interval


def test_a_tick_in_the_future_counts_as_just_now() -> None:
    assert liveness(NOW + timedelta(seconds=5), 30.0, NOW).age_s == 0.0
