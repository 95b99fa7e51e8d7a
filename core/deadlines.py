"""Pure: what to do when a deadline or a heartbeat comes due, given what the vendor said.

Escalating is a claim about the vendor's job ("it is late"), so it is checked against the vendor
first: the job's ``status`` is asked, and a final answer is applied instead of escalating (a
dropped completion webhook then costs nothing but the wait). Only when the vendor says the job is
still open, or cannot be asked, does the escalation go ahead, and it says which of those it was.
A submit retry that would start past the execution deadline is a deadline too: under
``on_deadline=escalate`` it escalates once and keeps retrying within its budget; under ``cancel``
the task is canceled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

#: the name a heartbeat's escalation goes by (beside the ``acceptance`` and ``execution`` deadlines)
HEARTBEAT = "heartbeat"
FINAL_STATUSES = frozenset({"succeeded", "failed", "canceled"})
OPEN_STATUSES = frozenset({"queued", "running"})


class VendorAnswer(StrEnum):
    """What asking the vendor about a job came to; carried in the escalation (``vendor_status``)."""

    FINAL = "final"  # the job finished: apply that outcome instead of escalating
    QUEUED = "queued"  # the vendor holds the job, not started
    RUNNING = "running"  # the vendor says it is working on it
    UNREACHABLE = "unreachable"  # the call failed (outage, timeout, an answer outside the contract)
    UNKNOWN_JOB = "unknown_job"  # the vendor does not know the job (404)
    NO_JOB = "no_job"  # never accepted by the vendor: there is no job to ask about


def answer_of(status: str) -> VendorAnswer:
    """A vendor's ``status`` (docs/design.md §5) as an answer. Raises ValueError outside the contract."""
    if status in FINAL_STATUSES:
        return VendorAnswer.FINAL
    if status in OPEN_STATUSES:
        return VendorAnswer(status)
    raise ValueError(f"not a job status: {status!r}")


@dataclass(frozen=True)
class Step:
    """What one answer leads to. At most one of ``apply`` and ``escalate`` is true."""

    apply: bool = False  # apply the vendor's final status through the webhook path
    escalate: bool = False  # ``task.deadline_exceeded`` and an incident, saying ``vendor_status``
    cancel: bool = False  # then cancel the task (on_deadline=cancel)
    rearm: bool = False  # a heartbeat: wait another ``heartbeat_timeout_s`` for news


ACCEPTANCE = "acceptance"
#: the states in which each deadline still waits for something (past them, it was met)
_AWAITED_IN: dict[str, frozenset[str]] = {
    ACCEPTANCE: frozenset({"requested", "submitted"}),
    "execution": frozenset({"requested", "submitted", "accepted", "cancel_requested"}),
    HEARTBEAT: frozenset({"submitted", "accepted", "cancel_requested"}),
}


def still_awaited(deadline: str, state: str) -> bool:
    """Does a task in ``state`` still wait for what ``deadline`` is about? An acceptance deadline is
    met once the task is accepted (or further), the others once it is final."""
    return state in _AWAITED_IN.get(deadline, frozenset())


def at_deadline(answer: VendorAnswer, on_deadline: str, deadline: str = "execution") -> Step:
    """An acceptance or execution deadline passed and the vendor was asked. What the deadline waited
    for may have happened with its webhook lost: a final job, or for acceptance a running one too,
    is applied instead of escalated."""
    if answer is VendorAnswer.FINAL or (deadline == ACCEPTANCE and answer is VendorAnswer.RUNNING):
        return Step(apply=True)
    return Step(escalate=True, cancel=on_deadline == "cancel")


def at_heartbeat(answer: VendorAnswer) -> Step:
    """No vendor event for ``heartbeat_timeout_s`` and the vendor was asked. An open job the vendor
    answers for is alive (watched again after another timeout); a vendor that does not answer, or
    does not know the job, is escalated (never canceled: a heartbeat is a warning, not a deadline
    the domain app set)."""
    if answer is VendorAnswer.FINAL:
        return Step(apply=True)
    if answer in (VendorAnswer.QUEUED, VendorAnswer.RUNNING):
        return Step(rearm=True)
    return Step(escalate=True)


class RetryAtDeadline(StrEnum):
    RETRY = "retry"  # schedule the retry as the budget allows
    ESCALATE_AND_RETRY = "escalate_and_retry"  # escalate once, then retry all the same
    CANCEL = "cancel"  # cancel the task; no further attempt


def retry_past_deadline(on_deadline: str, *, escalated: bool) -> RetryAtDeadline:
    """A retry the budget allows would start after the execution deadline. ``escalated``: the
    execution deadline was escalated already (by beat, or an earlier retry)."""
    if on_deadline == "cancel":
        return RetryAtDeadline.CANCEL
    return RetryAtDeadline.RETRY if escalated else RetryAtDeadline.ESCALATE_AND_RETRY


def passes_deadline(delay_s: float, deadline_in_s: float | None) -> bool:
    """Would an attempt ``delay_s`` from now start at or after the deadline?"""
    return deadline_in_s is not None and delay_s >= deadline_in_s


def heartbeat_due(last_event_at: datetime, timeout_s: int | None) -> datetime | None:
    """When silence since ``last_event_at`` becomes due for a check; None: no heartbeat kept."""
    if not timeout_s:
        return None
    return last_event_at + timedelta(seconds=timeout_s)


def heartbeat_is_due(due_at: datetime | None, now: datetime) -> bool:
    return due_at is not None and due_at <= now
