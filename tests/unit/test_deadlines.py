"""Deadline and heartbeat rules (core.deadlines): what the vendor's answer leads to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.deadlines import (
    FINAL_STATUSES,
    RetryAtDeadline,
    Step,
    VendorAnswer,
    answer_of,
    at_deadline,
    at_heartbeat,
    heartbeat_due,
    heartbeat_is_due,
    passes_deadline,
    retry_past_deadline,
    still_awaited,
)
from core.states import State

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOT_FINAL = [a for a in VendorAnswer if a is not VendorAnswer.FINAL]


@pytest.mark.parametrize("status", sorted(FINAL_STATUSES))
def test_a_final_status_is_applied_not_escalated(status: str) -> None:
    assert answer_of(status) is VendorAnswer.FINAL
    for on_deadline in ("escalate", "cancel"):
        assert at_deadline(answer_of(status), on_deadline) == Step(apply=True)
    assert at_heartbeat(answer_of(status)) == Step(apply=True)


@pytest.mark.parametrize("answer", NOT_FINAL)
def test_anything_short_of_final_escalates_at_a_deadline_and_cancels_only_when_asked(answer: VendorAnswer) -> None:
    assert at_deadline(answer, "escalate") == Step(escalate=True)
    assert at_deadline(answer, "cancel") == Step(escalate=True, cancel=True)


def test_an_acceptance_deadline_is_met_by_a_running_job_an_execution_deadline_is_not() -> None:
    running = VendorAnswer.RUNNING
    assert at_deadline(running, "cancel", "acceptance") == Step(apply=True)
    assert at_deadline(running, "cancel", "execution") == Step(escalate=True, cancel=True)
    assert at_deadline(VendorAnswer.QUEUED, "escalate", "acceptance") == Step(escalate=True)


@pytest.mark.parametrize(
    ("deadline", "awaited_in"),
    [
        ("acceptance", {"requested", "submitted"}),
        ("execution", {"requested", "submitted", "accepted", "cancel_requested"}),
        ("heartbeat", {"submitted", "accepted", "cancel_requested"}),
        ("nonsense", set()),
    ],
)
def test_what_each_deadline_still_waits_for(deadline: str, awaited_in: set[str]) -> None:
    states = {s.value for s in State}
    assert {s for s in states if still_awaited(deadline, s)} == awaited_in


@pytest.mark.parametrize("status", ["queued", "running"])
def test_a_heartbeat_the_vendor_answers_for_is_rearmed(status: str) -> None:
    assert at_heartbeat(answer_of(status)) == Step(rearm=True)


@pytest.mark.parametrize("answer", [VendorAnswer.UNREACHABLE, VendorAnswer.UNKNOWN_JOB, VendorAnswer.NO_JOB])
def test_a_heartbeat_the_vendor_does_not_answer_for_escalates_and_never_cancels(answer: VendorAnswer) -> None:
    step = at_heartbeat(answer)
    assert step.escalate and not step.cancel and not step.apply and not step.rearm


def test_a_status_outside_the_contract_is_refused() -> None:
    with pytest.raises(ValueError):
        answer_of("done")


@given(
    st.sampled_from(list(VendorAnswer)),
    st.sampled_from(["escalate", "cancel"]),
    st.sampled_from(["acceptance", "execution"]),
)
def test_a_step_never_both_applies_and_escalates(answer: VendorAnswer, on_deadline: str, deadline: str) -> None:
    for step in (at_deadline(answer, on_deadline, deadline), at_heartbeat(answer)):
        assert not (step.apply and step.escalate)
        assert step.cancel <= step.escalate  # a cancel always comes with its escalation
        assert step.apply or step.escalate or step.rearm  # every answer leads somewhere


def test_escalate_mode_escalates_once_then_keeps_retrying() -> None:
    assert retry_past_deadline("escalate", escalated=False) is RetryAtDeadline.ESCALATE_AND_RETRY
    assert retry_past_deadline("escalate", escalated=True) is RetryAtDeadline.RETRY


@given(st.booleans())
def test_cancel_mode_cancels_whether_or_not_escalated(escalated: bool) -> None:
    assert retry_past_deadline("cancel", escalated=escalated) is RetryAtDeadline.CANCEL


@given(st.floats(0, 1e6, allow_nan=False), st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)))
def test_passes_deadline(delay: float, deadline_in: float | None) -> None:
    assert passes_deadline(delay, deadline_in) == (deadline_in is not None and delay >= deadline_in)


@given(st.integers(1, 10**7), st.integers(0, 10**7))
def test_heartbeat_due_after_exactly_the_timeout(timeout: int, elapsed: int) -> None:
    due = heartbeat_due(T0, timeout)
    assert due == T0 + timedelta(seconds=timeout)
    assert heartbeat_is_due(due, T0 + timedelta(seconds=elapsed)) == (elapsed >= timeout)


@pytest.mark.parametrize("timeout", [None, 0])
def test_no_timeout_no_heartbeat(timeout: int | None) -> None:
    assert heartbeat_due(T0, timeout) is None
    assert not heartbeat_is_due(None, T0 + timedelta(days=999))
