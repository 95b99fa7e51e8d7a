"""The GCRA arithmetic every shared limit uses (core.rate_limit), without any storage."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.rate_limit import Decision, Limit, gcra, retry_after_header

rates = st.floats(min_value=0.05, max_value=200, allow_nan=False, allow_infinity=False)
bursts = st.integers(min_value=1, max_value=20)
#: gaps between successive requests (seconds); many zeros: bursts of simultaneous requests
gaps = st.lists(st.one_of(st.just(0.0), st.floats(min_value=0, max_value=3)), min_size=1, max_size=200)
max_waits = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=5))


def run(limit: Limit, times: list[float], max_wait_s: float = 0.0) -> list[tuple[float, Decision]]:
    state: float | None = None
    out = []
    for now in times:
        state, decision = gcra(state, now, limit, max_wait_s)
        out.append((now, decision))
    return out


def granted_slots(limit: Limit, gap_list: list[float], max_wait_s: float) -> list[float]:
    times = list(_accumulate(gap_list))
    return sorted(now + d.wait_s for now, d in run(limit, times, max_wait_s) if d.allowed)


def _accumulate(values: list[float], start: float = 1_700_000_000.0) -> list[float]:
    out, t = [], start
    for v in values:
        t += v
        out.append(t)
    return out


@settings(max_examples=300)
@given(rates, bursts, gaps, max_waits)
def test_never_more_than_rate_times_window_plus_burst_in_any_window(rate, burst, gap_list, max_wait) -> None:
    limit = Limit(rate, burst)
    slots = granted_slots(limit, gap_list, max_wait)
    slack_s = 1e-4  # float rounding of epoch seconds (~0.24 µs per step), never a whole call
    # Every window [slots[i], slots[j]] holds j - i + 1 granted calls.
    for i in range(len(slots)):
        for j in range(i, len(slots)):
            assert j - i + 1 <= rate * (slots[j] - slots[i] + slack_s) + burst


@settings(max_examples=200)
@given(rates, bursts, gaps)
def test_a_refusal_says_when_asking_again_is_granted_and_costs_nothing(rate, burst, gap_list) -> None:
    limit = Limit(rate, burst)
    state: float | None = None
    for now in _accumulate(gap_list):
        before = state
        state, decision = gcra(state, now, limit)
        if decision.allowed:
            assert decision.wait_s == 0 and decision.retry_after_s == 0
            continue
        assert state == before  # a refused caller does not push the others back
        assert decision.retry_after_s > 0
        # Asking again exactly then is granted; a little earlier is not.
        assert gcra(state, now + decision.retry_after_s + 1e-9, limit)[1].allowed
        assert not gcra(state, now + decision.retry_after_s * 0.5, limit)[1].allowed


@given(rates, bursts)
def test_after_a_quiet_spell_exactly_burst_calls_go_at_once(rate, burst) -> None:
    decisions = [d for _, d in run(Limit(rate, burst), [100.0] * (burst + 3))]
    assert [d.allowed for d in decisions] == [True] * burst + [False] * 3
    assert math.isclose(decisions[burst].retry_after_s, 1 / rate)


def test_a_reserved_slot_waits_its_turn() -> None:
    """With max_wait, callers queue for slots one interval apart instead of being refused."""
    decisions = [d for _, d in run(Limit(10, 1), [5.0] * 4, max_wait_s=0.25)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [round(d.wait_s, 9) for d in decisions[:3]] == [0, 0.1, 0.2]
    assert math.isclose(decisions[3].retry_after_s, 0.05)


def test_retry_after_header_is_whole_seconds_at_least_one() -> None:
    assert [retry_after_header(s) for s in (0.0, 0.001, 0.999, 1.0, 1.2, 59.5)] == ["1", "1", "1", "1", "2", "60"]


@pytest.mark.parametrize("rate,burst", [(0, 1), (-1, 1), (float("inf"), 1), (float("nan"), 1), (1, 0)])
def test_a_limit_that_could_never_bite_or_never_grant_is_refused(rate, burst) -> None:
    with pytest.raises(ValueError):
        Limit(rate, burst)
