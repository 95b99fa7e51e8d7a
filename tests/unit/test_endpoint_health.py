"""Endpoint health (core.endpoint_health): pause after failures in a row, doubling pauses, one probe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.endpoint_health import Admission, Health, HealthPolicy, Verdict, admit, after_failure, after_success

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
POLICY = HealthPolicy(failures_to_pause=3, pause_s=10.0, pause_cap_s=80.0, probe_s=20.0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_an_endpoint_is_paused_after_failures_in_a_row_and_not_before():
    health = Health()
    for n in range(1, 3):
        health = after_failure(health, at(n), POLICY)
        assert admit(health, at(n), POLICY).verdict is Verdict.GO
    health = after_failure(health, at(3), POLICY)
    assert (health.failures, health.pauses, health.paused_until) == (3, 1, at(13))
    assert admit(health, at(5), POLICY) == admission_wait(health, at(13))


def admission_wait(health: Health, until: datetime) -> Admission:

    return Admission(Verdict.WAIT, health, until)


def test_a_success_between_failures_starts_the_count_again():
    health = after_failure(after_failure(Health(), at(1), POLICY), at(2), POLICY)
    health = after_success(health)
    assert health == Health() and health.healthy
    assert after_failure(after_failure(health, at(3), POLICY), at(4), POLICY).paused_until is None


def test_a_pause_that_ran_out_lets_one_probe_through_and_holds_the_rest():
    paused = Health(failures=3, pauses=1, paused_until=at(10))
    first = admit(paused, at(11), POLICY)
    assert first.verdict is Verdict.PROBE and first.health.probe_until == at(31)
    # the probe is stored: every other delivery waits for it, at most probe_s
    assert admit(first.health, at(12), POLICY) == admission_wait(first.health, at(31))
    assert first.health.paused_at(at(12))
    # a probe whose worker died frees the endpoint for another probe once probe_s has passed
    assert admit(first.health, at(32), POLICY).verdict is Verdict.PROBE


def test_a_failed_probe_pauses_again_for_twice_as_long_and_a_good_one_resumes():
    probing = admit(Health(failures=3, pauses=1, paused_until=at(10)), at(11), POLICY).health
    again = after_failure(probing, at(15), POLICY)
    assert (again.pauses, again.paused_until, again.probe_until) == (2, at(35), None)
    assert after_success(probing) == Health()


def test_failures_of_deliveries_already_in_flight_do_not_lengthen_a_pause():
    paused = Health(failures=3, pauses=1, paused_until=at(13))
    later = after_failure(paused, at(5), POLICY)
    assert (later.failures, later.pauses, later.paused_until) == (4, 1, at(13))
    # ...nor does one that lands after the pause ran out, before any probe: the next delivery probes
    stale = after_failure(paused, at(14), POLICY)
    assert (stale.pauses, stale.paused_until) == (1, at(13))
    assert admit(stale, at(14), POLICY).verdict is Verdict.PROBE


def test_bad_policies_are_refused():
    with pytest.raises(ValueError):
        HealthPolicy(failures_to_pause=0)
    with pytest.raises(ValueError):
        HealthPolicy(pause_s=60, pause_cap_s=30)


events = st.lists(st.tuples(st.sampled_from(["ok", "fail", "start"]), st.floats(0.0, 200.0)), max_size=60)


@given(events=events, threshold=st.integers(1, 6))
def test_any_history_keeps_the_pause_within_its_bounds_and_one_probe_at_a_time(events, threshold):
    """Whatever order successes, failures and delivery starts come in: a pause is never longer than
    the cap nor shorter than the base, the endpoint pauses only after ``threshold`` failures in a
    row, and while a probe is in flight no second one is admitted."""
    policy = HealthPolicy(failures_to_pause=threshold, pause_s=5.0, pause_cap_s=60.0, probe_s=15.0)
    health, now, in_a_row = Health(), T0, 0
    for kind, step in events:
        now += timedelta(seconds=step)
        if kind == "ok":
            health, in_a_row = after_success(health), 0
            assert health.healthy
        elif kind == "fail":
            before = health
            health, in_a_row = after_failure(health, now, policy), in_a_row + 1
            if health.pauses > before.pauses:
                assert in_a_row >= threshold
                assert health.paused_until is not None
                length = (health.paused_until - now).total_seconds()
                assert policy.pause_s <= length <= policy.pause_cap_s
        else:
            admission = admit(health, now, policy)
            if admission.verdict is Verdict.PROBE:
                assert admit(admission.health, now, policy).verdict is Verdict.WAIT
                health = admission.health
            elif admission.verdict is Verdict.WAIT:
                assert admission.until is not None and admission.until > now
            else:
                assert not health.paused_at(now)


@given(pauses=st.integers(1, 200))
def test_pauses_double_up_to_the_cap(pauses):
    length = POLICY.pause_for(pauses)
    assert length == min(POLICY.pause_cap_s, POLICY.pause_s * 2 ** min(pauses - 1, 63))
    assert POLICY.pause_for(pauses + 1) >= length
