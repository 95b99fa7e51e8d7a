"""Endpoint health trips only on an endpoint that is down (issue 41): which failures count, what a
rejected message does to a pause and a probe, and that the delivery whose failure paused an
endpoint leaves the probe to the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.classify import Failure
from core.endpoint_health import (
    Health,
    HealthPolicy,
    Signal,
    Verdict,
    admit,
    after_failure,
    after_rejection,
    after_success,
    signal_of,
)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
POLICY = HealthPolicy(failures_to_pause=3, pause_s=10.0, pause_cap_s=80.0, probe_s=20.0, probe_grace_s=4.0)
SHIPPED = HealthPolicy()  # the shipped defaults: 5 in a row, 30 s doubling to 900 s


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("status", "failure", "signal"),
    [
        (None, Failure.CONNECT_ERROR, Signal.DOWN),
        (None, Failure.CONNECT_TIMEOUT, Signal.DOWN),
        (None, Failure.READ_TIMEOUT, Signal.DOWN),
        (None, Failure.RESET_AFTER_SEND, Signal.DOWN),
        (None, None, Signal.DOWN),
        (None, Failure.BAD_RESPONSE, Signal.REJECTED),
        (500, None, Signal.DOWN),
        (503, None, Signal.DOWN),
        (429, None, Signal.DOWN),
        (408, None, Signal.DOWN),
        (302, None, Signal.REJECTED),
        (301, None, Signal.REJECTED),
        (400, None, Signal.REJECTED),
        (401, None, Signal.REJECTED),
        (404, None, Signal.REJECTED),
        (422, None, Signal.REJECTED),
    ],
)
def test_what_a_failure_says_of_its_endpoint(status: int | None, failure: Failure | None, signal: Signal) -> None:
    assert signal_of(status, failure) is signal


@given(status=st.integers(100, 599).filter(lambda s: not 200 <= s < 300))
def test_only_5xx_408_and_429_among_answers_say_the_endpoint_is_down(status: int) -> None:
    down = status >= 500 or status in (408, 429)
    assert (signal_of(status) is Signal.DOWN) is down


def _answered(health: Health, status: int, now: datetime, policy: HealthPolicy) -> Health:
    """What the relay does with an answer (workers.tasks.relay): the rule in pure form."""
    if 200 <= status < 300:
        return after_success(health)
    if signal_of(status) is Signal.DOWN:
        return after_failure(health, now, policy)
    return after_rejection(health, now, was_probe=False)


@given(statuses=st.lists(st.sampled_from([302, 302, 301, 400, 404, 204]), max_size=200))
def test_a_healthy_endpoint_that_rejects_some_callbacks_is_never_paused_under_the_shipped_defaults(
    statuses: list[int],
) -> None:
    """The issue's app: 302 on two paths, 204 on the others, the rejected ones retried fast: runs of
    rejections far longer than five in a row never pause it."""
    health = Health()
    for n, status in enumerate([302] * 12 + statuses):
        health = _answered(health, status, at(n), SHIPPED)
        assert admit(health, at(n), SHIPPED).verdict is Verdict.GO
    assert health == Health()


def test_an_endpoint_that_is_down_is_still_paused_amid_rejections() -> None:
    health = Health()
    for n, status in enumerate([503, 302, 404, 503, 301, 503]):
        health = _answered(health, status, at(n), POLICY)
    assert (health.failures, health.pauses, health.paused_until) == (3, 1, at(15))


def test_a_rejected_probe_hands_the_probe_on_and_does_not_lengthen_the_pause() -> None:
    paused = Health(failures=3, pauses=1, paused_until=at(10), paused_by=7)
    probe = admit(paused, at(11), POLICY, delivery=8)
    assert probe.verdict is Verdict.PROBE
    assert admit(probe.health, at(12), POLICY, delivery=9).verdict is Verdict.WAIT  # one probe at a time
    rejected = after_rejection(probe.health, at(12), was_probe=True)
    assert (rejected.pauses, rejected.paused_until, rejected.probe_until) == (1, at(10), None)
    assert admit(rejected, at(12), POLICY, delivery=9).verdict is Verdict.PROBE  # the next one, at once
    # a rejection that was not the probe (it was in flight before) leaves the probe where it is
    assert after_rejection(probe.health, at(12), was_probe=False) == probe.health


def test_the_delivery_that_paused_an_endpoint_leaves_the_probe_to_the_others_for_a_grace() -> None:
    health = Health()
    for n, delivery in enumerate((1, 2, 3), start=1):
        health = after_failure(health, at(n), POLICY, delivery)
    assert (health.paused_until, health.paused_by) == (at(13), 3)
    held = admit(health, at(14), POLICY, delivery=3)
    assert (held.verdict, held.until) == (Verdict.WAIT, at(17))  # the pause's end and the grace
    assert admit(health, at(14), POLICY, delivery=4).verdict is Verdict.PROBE
    assert admit(health, at(17), POLICY, delivery=3).verdict is Verdict.PROBE  # nobody else came: its turn
    # a failed probe names the probe: it is the one that waits next time
    probing = admit(health, at(17), POLICY, delivery=3).health
    again = after_failure(probing, at(18), POLICY, 3)
    assert (again.pauses, again.paused_by) == (2, 3)


outcomes = st.lists(
    st.tuples(st.sampled_from(["down", "rejected", "ok", "start"]), st.floats(0.0, 60.0), st.integers(1, 6)),
    max_size=80,
)


@given(events=outcomes, threshold=st.integers(1, 6))
def test_rejections_never_pause_nor_lengthen_a_pause_and_the_pauser_never_probes_in_its_grace(
    events: list[tuple[str, float, int]], threshold: int
) -> None:
    """Whatever order deliveries find the endpoint down, rejected or delivered: the endpoint pauses
    only after ``threshold`` downs with no success between them (rejections neither count nor break
    the run), a rejection never changes the pause, and within the grace after a pause ran out its
    pauser is never admitted as the probe."""
    policy = HealthPolicy(failures_to_pause=threshold, pause_s=5.0, pause_cap_s=60.0, probe_s=15.0, probe_grace_s=3.0)
    health, now, downs, probe_by = Health(), T0, 0, None
    for kind, step, delivery in events:
        now += timedelta(seconds=step)
        before = health
        if kind == "ok":
            health, downs, probe_by = after_success(health), 0, None
        elif kind == "down":
            health, downs = after_failure(health, now, policy, delivery), downs + 1
            if health.pauses > before.pauses:
                assert downs >= threshold and health.paused_by == delivery
            probe_by = None if health.probe_until is None else probe_by
        elif kind == "rejected":
            health = after_rejection(health, now, was_probe=delivery == probe_by)
            assert (health.failures, health.pauses, health.paused_until) == (
                before.failures,
                before.pauses,
                before.paused_until,
            )
            if health.probe_until != before.probe_until:
                probe_by = None
        else:
            admission = admit(health, now, policy, delivery)
            if admission.verdict is Verdict.PROBE:
                assert health.paused_until is not None
                in_grace = now < health.paused_until + timedelta(seconds=policy.probe_grace_s)
                assert not (in_grace and delivery == health.paused_by)
                health, probe_by = admission.health, delivery
