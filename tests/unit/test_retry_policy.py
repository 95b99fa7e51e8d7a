"""Retry policy (core.retry_policy): bounded proportional jitter, caps, budgets, Retry-After."""

from __future__ import annotations

import math
from random import Random
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.retry_policy import RetryPolicy, next_delay, retry_after_past_cap
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings
from webhooks.signing import generate_secret
from workers.policies import provider_policy, relay_policy

RELAY_SCHEDULE = (5, 300, 1800, 7200, 18000, 36000, 36000)
# Float slack for the *upper* bound only: rng.uniform(a, b) may round a hair past b.
EPS = 1e-9

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 40),
    base_s=st.floats(0, 100, allow_nan=False),
    factor=st.floats(1, 10, allow_nan=False),
    cap_s=st.floats(0, 10_000, allow_nan=False),
    max_total_s=st.just(math.inf),
    jitter=st.floats(0, 0.99, allow_nan=False),
)
schedules = st.lists(st.floats(0, 100_000, allow_nan=False), min_size=1, max_size=10).map(tuple)


def bounds(policy: RetryPolicy, failed: int) -> tuple[float, float]:
    nominal = policy.nominal_delay(failed)
    return nominal * (1 - policy.jitter), min(policy.cap_s, nominal * (1 + policy.jitter))


# --- bounds -------------------------------------------------------------------------------


@given(policy=policies, failed=st.integers(1, 39), seed=st.integers(0, 2**32))
def test_delay_within_jitter_bounds_and_cap(policy, failed, seed):
    """Delay ∈ [nominal·(1−j), min(cap, nominal·(1+j))]: never earlier than allowed, never past the cap."""
    delay = next_delay(failed, policy, Random(seed))
    if failed >= policy.max_attempts:
        assert delay is None
        return
    low, high = bounds(policy, failed)
    assert delay is not None
    assert low <= delay <= high + EPS * max(1.0, high)
    assert delay <= policy.cap_s


@given(policy=policies, schedule=schedules, failed=st.integers(1, 39), seed=st.integers(0, 2**32))
def test_delay_within_bounds_with_explicit_schedule(policy, schedule, failed, seed):
    """The same bounds hold when the nominal delay comes from an explicit schedule."""
    policy = RetryPolicy(**{**policy.__dict__, "schedule": schedule})
    delay = next_delay(failed, policy, Random(seed))
    if failed >= policy.max_attempts:
        assert delay is None
        return
    assert delay is not None
    low, high = bounds(policy, failed)
    assert low <= delay <= high + EPS * max(1.0, high)


@given(policy=policies, n=st.integers(1, 60))
def test_nominal_is_monotone_and_capped(policy, n):
    """Exponential nominal delays never shrink from one attempt to the next and never exceed cap."""
    a, b = policy.nominal_delay(n), policy.nominal_delay(n + 1)
    assert 0 <= a <= b <= policy.cap_s


def test_nominal_exponential_values():
    policy = RetryPolicy(base_s=2, factor=2, cap_s=300)
    assert [policy.nominal_delay(n) for n in range(1, 10)] == [2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_zero_jitter_is_exactly_nominal():
    policy = RetryPolicy(jitter=0.0, max_attempts=10)
    rng = Random(1)
    assert [next_delay(n, policy, rng) for n in range(1, 10)] == [2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_never_zero_even_with_maximal_jitter():
    """Unlike full jitter, a positive nominal delay never becomes an immediate retry."""
    policy = RetryPolicy(jitter=0.99, base_s=1.0)
    rng = Random(7)
    assert all(cast(float, next_delay(1, policy, rng)) >= 0.01 - EPS for _ in range(2000))  # below max_attempts


def test_nominal_is_capped_for_very_many_attempts():
    policy = RetryPolicy(max_attempts=2000)
    assert policy.nominal_delay(1100) == policy.cap_s
    delay = next_delay(1100, policy, Random(0))
    assert delay is not None
    assert delay <= policy.cap_s


# --- giving up ----------------------------------------------------------------------------


@given(max_attempts=st.integers(1, 20), extra=st.integers(0, 20), seed=st.integers(0, 1000))
def test_none_once_attempts_are_used_up(max_attempts, extra, seed):
    """After max_attempts attempts in all (the first included) there is no next delay."""
    policy = RetryPolicy(max_attempts=max_attempts)
    assert next_delay(max_attempts + extra, policy, Random(seed)) is None


def test_last_retry_before_max_attempts_is_scheduled():
    policy = RetryPolicy(max_attempts=3, jitter=0)
    assert next_delay(1, policy, Random(0)) == 2
    assert next_delay(2, policy, Random(0)) == 4
    assert next_delay(3, policy, Random(0)) is None


def test_single_attempt_policy_never_retries():
    assert next_delay(1, RetryPolicy(max_attempts=1), Random(0)) is None


@pytest.mark.parametrize("failed", [0, -1])
def test_failed_attempts_starts_at_one(failed):
    with pytest.raises(ValueError):
        next_delay(failed, RetryPolicy(), Random(0))


def test_none_when_total_budget_would_be_exceeded():
    """elapsed + delay > max_total_s → give up; exactly at the budget is still allowed."""
    policy = RetryPolicy(jitter=0, max_total_s=100)  # first delay is exactly 2 s
    assert next_delay(1, policy, Random(0), elapsed_s=98) == 2
    assert next_delay(1, policy, Random(0), elapsed_s=98.5) is None
    assert next_delay(1, policy, Random(0), elapsed_s=1000) is None


@given(elapsed=st.floats(0, 200, allow_nan=False), seed=st.integers(0, 1000), failed=st.integers(1, 5))
def test_total_budget_property(elapsed, seed, failed):
    """A returned delay always lands within max_total_s; None only when it would not."""
    policy = RetryPolicy(max_total_s=100)
    free = next_delay(failed, policy, Random(seed))
    delay = next_delay(failed, policy, Random(seed), elapsed_s=elapsed)
    if elapsed + free > policy.max_total_s:
        assert delay is None
    else:
        assert delay == free


# --- Retry-After --------------------------------------------------------------------------


@given(
    retry_after=st.floats(0, 10_000, allow_nan=False),
    failed=st.integers(1, 5),
    seed=st.integers(0, 1000),
)
def test_retry_after_is_honoured_within_the_cap(retry_after, failed, seed):
    """Never sooner than Retry-After, never past the cap: a longer request means no retry at all."""
    policy = RetryPolicy(cap_s=60)
    delay = next_delay(failed, policy, Random(seed), retry_after_s=retry_after)
    if retry_after > policy.cap_s:
        assert delay is None and retry_after_past_cap(policy, retry_after)
        return
    assert delay is not None and retry_after <= delay <= policy.cap_s
    assert delay == max(next_delay(failed, policy, Random(seed)), retry_after)
    assert not retry_after_past_cap(policy, retry_after)


def test_retry_after_larger_than_cap_gives_up():
    policy = RetryPolicy(cap_s=10)
    assert next_delay(1, policy, Random(0), retry_after_s=3600) is None
    assert next_delay(1, policy, Random(0), retry_after_s=10) == 10


def test_retry_after_counts_against_total_budget():
    policy = RetryPolicy(max_total_s=1000, cap_s=10_000)
    assert next_delay(1, policy, Random(0), retry_after_s=5000) is None
    assert next_delay(1, policy, Random(0), elapsed_s=900, retry_after_s=200) is None


def test_retry_after_counts_against_deadline():
    assert next_delay(1, RetryPolicy(), Random(0), retry_after_s=120, deadline_in_s=60) is None


def test_small_retry_after_does_not_shorten_backoff():
    policy = RetryPolicy(jitter=0, base_s=30)
    assert next_delay(1, policy, Random(0), retry_after_s=1) == 30


# --- deadline -----------------------------------------------------------------------------


def test_none_when_delay_reaches_deadline():
    """A retry that would start at or after the task's deadline is not scheduled (caller escalates)."""
    policy = RetryPolicy(jitter=0)  # first delay exactly 2 s
    assert next_delay(1, policy, Random(0), deadline_in_s=2.0) is None
    assert next_delay(1, policy, Random(0), deadline_in_s=1.0) is None
    assert next_delay(1, policy, Random(0), deadline_in_s=0) is None
    assert next_delay(1, policy, Random(0), deadline_in_s=-5) is None
    assert next_delay(1, policy, Random(0), deadline_in_s=2.001) == 2


@given(deadline=st.floats(-10, 1000, allow_nan=False), seed=st.integers(0, 1000))
def test_deadline_property(deadline, seed):
    policy = RetryPolicy()
    free = next_delay(3, policy, Random(seed))
    delay = next_delay(3, policy, Random(seed), deadline_in_s=deadline)
    assert delay == (free if free < deadline else None)


# --- explicit schedule (the relay's) ------------------------------------------------------


def test_schedule_used_in_order_then_last_entry_repeats():
    policy = RetryPolicy(schedule=(1, 5, 10), cap_s=1000, max_attempts=10, jitter=0)
    assert [policy.nominal_delay(n) for n in range(1, 7)] == [1, 5, 10, 10, 10, 10]
    assert [next_delay(n, policy, Random(0)) for n in range(1, 5)] == [1, 5, 10, 10]


def test_schedule_is_capped():
    policy = RetryPolicy(schedule=(1, 5000), cap_s=100)
    assert policy.nominal_delay(2) == 100


def test_schedule_ignores_base_and_factor():
    policy = RetryPolicy(schedule=(7,), base_s=1000, factor=10, cap_s=100, jitter=0)
    assert next_delay(1, policy, Random(0)) == 7


class _Extreme(Random):
    """An rng whose jitter factor is always the lowest (or highest) the policy allows."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


@given(seed=st.integers(0, 2**32))
def test_production_relay_policy_within_twenty_percent(seed):
    """The relay policy production builds from the default settings: each step of the
    Standard-Webhooks-like schedule stays within ±20 %, and the eighth attempt is the last."""
    policy = relay_policy(Settings.from_env({}))
    assert policy.schedule == RELAY_SCHEDULE and policy.max_attempts == 8
    rng = Random(seed)
    elapsed = 0.0
    for failed, nominal in enumerate(RELAY_SCHEDULE, start=1):
        delay = next_delay(failed, policy, rng, elapsed_s=elapsed)
        assert delay is not None
        assert nominal * 0.8 <= delay <= nominal * 1.2 * (1 + EPS)
        elapsed += delay
    assert next_delay(8, policy, rng, elapsed_s=elapsed) is None


@pytest.mark.parametrize("high", [False, True])
def test_production_relay_policy_reaches_both_jitter_bounds(high):
    """The cap leaves the longest steps their full +20 %: 10 h can become 12 h, not only 8–10 h."""
    policy = relay_policy(Settings.from_env({}))
    factor = 1.2 if high else 0.8
    delays = [next_delay(n, policy, _Extreme(high)) for n in range(1, len(RELAY_SCHEDULE) + 1)]
    assert delays == pytest.approx([nominal * factor for nominal in RELAY_SCHEDULE])


@given(
    schedule=schedules,
    max_attempts=st.integers(1, 20),
    max_total=st.floats(1, 10**6, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_production_relay_policy_from_any_configuration(schedule, max_attempts, max_total, seed):
    """Whatever is configured: every step is jittered within ±20 % uncut by the cap, and the
    attempts and the total time are the configured ones."""
    env = {
        "LIAISON_RELAY_SCHEDULE_S": ",".join(repr(d) for d in schedule),
        "LIAISON_RELAY_MAX_ATTEMPTS": str(max_attempts),
        "LIAISON_RELAY_MAX_TOTAL_S": repr(max_total),
    }
    policy = relay_policy(Settings.from_env(env))
    assert (policy.max_attempts, policy.max_total_s) == (max_attempts, max_total)
    rng = Random(seed)
    for failed in range(1, max_attempts):
        nominal = schedule[min(failed - 1, len(schedule) - 1)]
        delay = next_delay(failed, policy, rng)
        if delay is None:
            assert nominal * 1.2 * (1 + EPS) > max_total  # only the total time cuts a step short
        else:
            assert nominal * 0.8 <= delay <= nominal * 1.2 * (1 + EPS)
            assert delay <= max_total
    assert next_delay(max_attempts, policy, rng) is None


def test_production_relay_policy_gives_up_after_the_configured_total_time():
    policy = relay_policy(Settings.from_env({"LIAISON_RELAY_MAX_TOTAL_S": "3600"}))
    assert next_delay(2, policy, _Extreme(False), elapsed_s=3000) == 240  # 300 s −20 %, by 3240 s
    assert next_delay(2, policy, _Extreme(False), elapsed_s=3400) is None
    default = relay_policy(Settings.from_env({}))
    assert default.max_total_s == 2 * 24 * 3600
    assert next_delay(7, default, _Extreme(True), elapsed_s=2 * 24 * 3600 - 36000 * 1.2) == 36000 * 1.2
    assert next_delay(7, default, _Extreme(True), elapsed_s=2 * 24 * 3600 - 36000) is None


SIM = {
    "LIAISON_PROVIDER_SIM_BASE_URL": "http://sim.local:9000",
    "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": generate_secret(),
}


def test_production_provider_policy_defaults():
    """Submit and cancel: 6 attempts, 2 s doubling up to 300 s, ±20 %, within 24 h."""
    policy = provider_policy(ProviderSettings.from_env(SIM, "sim"))
    assert (policy.max_attempts, policy.base_s, policy.factor, policy.cap_s) == (6, 2.0, 2.0, 300.0)
    assert (policy.max_total_s, policy.jitter, policy.schedule) == (24 * 3600, 0.2, ())


@given(
    max_attempts=st.integers(1, 20),
    base=st.floats(0, 100, allow_nan=False),
    cap=st.floats(0, 10_000, allow_nan=False),
    max_total=st.floats(1, 10**6, allow_nan=False),
    failed=st.integers(1, 25),
    elapsed=st.floats(0, 10**6, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_production_provider_policy_follows_its_settings(max_attempts, base, cap, max_total, failed, elapsed, seed):
    """Every SUBMIT_* setting reaches the policy: attempts, base, cap and total time bound each delay."""
    env = {
        **SIM,
        "LIAISON_PROVIDER_SIM_SUBMIT_MAX_ATTEMPTS": str(max_attempts),
        "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_BASE_S": repr(base),
        "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_CAP_S": repr(cap),
        "LIAISON_PROVIDER_SIM_SUBMIT_MAX_TOTAL_S": repr(max_total),
    }
    policy = provider_policy(ProviderSettings.from_env(env, "sim"))
    delay = next_delay(failed, policy, Random(seed), elapsed_s=elapsed)
    if failed >= max_attempts:
        assert delay is None
        return
    nominal = min(cap, base * 2.0 ** (failed - 1))
    high = min(cap, nominal * 1.2) + EPS * max(1.0, cap)
    if delay is None:
        assert elapsed + high > max_total  # only the total time stops it before max_attempts
    else:
        assert nominal * 0.8 <= delay <= high
        assert elapsed + delay <= max_total


def test_relay_schedule_capped_when_cap_below_entries():
    """With the default 300 s cap the long relay entries are clipped to the cap."""
    policy = RetryPolicy(max_attempts=8, schedule=RELAY_SCHEDULE, jitter=0.2, max_total_s=math.inf)
    rng = Random(3)
    delays = cast(list[float], [next_delay(n, policy, rng) for n in range(1, 8)])  # below max_attempts: no None
    assert 4 <= delays[0] <= 6
    assert all(240 <= d <= 300 for d in delays[1:])


# --- determinism --------------------------------------------------------------------------


@given(seed=st.integers(0, 2**64), policy=policies)
def test_same_seed_same_delays(seed, policy):
    """Jitter comes only from the rng passed in: same seed, same sequence."""

    def run():
        rng = Random(seed)
        return [next_delay(n, policy, rng) for n in range(1, 15)]

    assert run() == run()


def test_different_seeds_usually_differ():
    policy = RetryPolicy()
    first = [next_delay(3, policy, Random(s)) for s in range(20)]
    assert len(set(first)) > 1


# --- invalid policies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"base_s": -0.1},
        {"cap_s": -1},
        {"factor": 0.99},
        {"factor": 0},
        {"jitter": -0.01},
        {"jitter": 1.0},
        {"jitter": 1.5},
    ],
)
def test_invalid_policies_raise(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 1}, {"base_s": 0}, {"cap_s": 0}, {"factor": 1}, {"jitter": 0}, {"jitter": 0.999}],
)
def test_edge_policies_are_valid(kwargs):
    RetryPolicy(**kwargs)


def test_negative_schedule_entry_is_rejected():
    with pytest.raises(ValueError):
        RetryPolicy(schedule=(5, -5))
