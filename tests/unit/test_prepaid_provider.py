"""A vendor call's rate slot taken in its start transaction (``RateLimitedProvider.take_in``) is
used by that call and by no other: the first call waits out the slot's wait and is not limited
again; a later call of the same delivery (a submit's ``find``) takes a slot of its own."""

from __future__ import annotations

from typing import Any

import pytest

from core.rate_limit import Decision, Limit
from runtime.limiter import RateLimited
from runtime.provider import JobSnapshot, SubmitJob
from workers.providers.limited import RateLimitedProvider


class Vendor:
    name = "sim"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def submit(self, job: SubmitJob) -> str:
        self.calls.append("submit")
        return "job-1"

    def cancel(self, job_id: str) -> None:
        self.calls.append("cancel")

    def status(self, job_id: str) -> JobSnapshot:
        self.calls.append("status")
        return JobSnapshot(job_id, "running")

    def find(self, reference: str) -> str | None:
        self.calls.append("find")
        return "job-1"


ALLOWED = Decision(True)


class Ledger:
    """A limiter whose answers are scripted, the slots it gave out counted by where they were taken."""

    def __init__(self, *, in_transaction: Decision | None, alone: Decision = ALLOWED) -> None:
        self.in_transaction = in_transaction
        self.alone = alone
        self.taken: list[str] = []

    def acquire(self, key: str, limit: Limit, *, max_wait_s: float = 0.0, now: float | None = None) -> Decision:
        self.taken.append("alone")
        return self.alone

    def acquire_with(self, session: Any, key: str, limit: Limit, *, max_wait_s: float = 0.0) -> Decision | None:
        self.taken.append("in transaction")
        return self.in_transaction


def _limited(ledger: Ledger, slept: list[float]) -> tuple[RateLimitedProvider, Vendor]:
    vendor = Vendor()
    return RateLimitedProvider(vendor, ledger, Limit(2.0, 1), max_wait_s=1.0, sleep=slept.append), vendor


def test_the_first_call_uses_the_slot_taken_in_the_start_and_waits_its_wait() -> None:
    slept: list[float] = []
    ledger = Ledger(in_transaction=Decision(True, wait_s=0.4))
    limited, vendor = _limited(ledger, slept)
    decision = limited.take_in(session=None)  # type: ignore[arg-type]
    assert decision is not None
    prepaid = limited.prepaid(decision)
    assert prepaid.submit(SubmitJob("ref-1", {})) == "job-1"
    assert vendor.calls == ["submit"]
    assert slept == [0.4]
    assert ledger.taken == ["in transaction"]  # one slot for one call


def test_a_later_call_of_the_same_delivery_takes_a_slot_of_its_own() -> None:
    slept: list[float] = []
    ledger = Ledger(in_transaction=ALLOWED, alone=Decision(True, wait_s=0.3))
    limited, vendor = _limited(ledger, slept)
    decision = limited.take_in(session=None)  # type: ignore[arg-type]
    assert decision is not None
    prepaid = limited.prepaid(decision)
    prepaid.submit(SubmitJob("ref-1", {}))
    assert prepaid.find("ref-1") == "job-1"
    assert vendor.calls == ["submit", "find"]
    assert ledger.taken == ["in transaction", "alone"]
    assert slept == [0.3]  # no wait for the prepaid slot (0 s), the second slot's own


def test_a_refused_slot_in_the_start_raises_rate_limited_and_calls_nothing() -> None:
    ledger = Ledger(in_transaction=Decision(False, retry_after_s=1.5))
    limited, vendor = _limited(ledger, [])
    with pytest.raises(RateLimited) as refused:
        limited.take_in(session=None)  # type: ignore[arg-type]
    assert refused.value.retry_after_s == 1.5
    assert refused.value.key == "provider:sim"
    assert vendor.calls == []


def test_a_limiter_stored_elsewhere_leaves_the_slot_to_the_call() -> None:
    """Redis: ``take_in`` gives None and the call takes its slot itself, as before."""
    slept: list[float] = []
    ledger = Ledger(in_transaction=None, alone=Decision(True, wait_s=0.2))
    limited, vendor = _limited(ledger, slept)
    assert limited.take_in(session=None) is None  # type: ignore[arg-type]
    limited.status("job-1")
    assert vendor.calls == ["status"]
    assert ledger.taken == ["in transaction", "alone"]
    assert slept == [0.2]
