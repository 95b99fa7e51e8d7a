"""The poll schedule: each delay in turn, then the last one for ever, always within its jitter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.polling import POLL_JITTER, nominal_poll_delay, poll_delay

SCHEDULES = st.lists(st.floats(min_value=0.01, max_value=86400), min_size=1, max_size=8)


def test_the_schedule_is_followed_then_its_last_delay_repeats() -> None:
    schedule = (5.0, 15.0, 60.0, 300.0)
    assert [nominal_poll_delay(schedule, n) for n in range(7)] == [5.0, 15.0, 60.0, 300.0, 300.0, 300.0, 300.0]


@given(SCHEDULES, st.integers(min_value=0, max_value=10_000), st.integers())
def test_a_delay_stays_within_its_jitter_and_is_never_zero(schedule: list[float], polls: int, seed: int) -> None:
    nominal = schedule[min(polls, len(schedule) - 1)]
    delay = poll_delay(schedule, polls, random.Random(seed))
    assert nominal * (1 - POLL_JITTER) <= delay <= nominal * (1 + POLL_JITTER)
    assert delay > 0


@given(SCHEDULES, st.integers(min_value=0, max_value=100))
def test_jitter_spreads_polls_made_together(schedule: list[float], polls: int) -> None:
    rng = random.Random(7)
    delays = {poll_delay(schedule, polls, rng) for _ in range(20)}
    assert len(delays) > 1


def test_nonsense_is_refused() -> None:
    with pytest.raises(ValueError):
        nominal_poll_delay((), 0)
    with pytest.raises(ValueError):
        nominal_poll_delay((1.0,), -1)
    with pytest.raises(ValueError):
        poll_delay((1.0,), 0, random.Random(1), jitter=1.0)
