"""A scenario's verdict over what was recorded: the accounting of ``bin/chaos`` (lost, doubled at the
vendor, completed twice), each task's callbacks in order, the processes that exited on their own, and
the time to recover from each fault. Pure (no I/O): tests/unit/test_cluster_sim.py checks it."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.chaos.domain import COMPLETED, Received
from bench.chaos.report import Accounting

#: (seconds, type, sequence, webhook-id): one callback's arrival at the domain app
Arrival = tuple[float, str, int | None, str]


def order_fault(arrivals: list[Arrival]) -> str | None:
    """Why one task's callbacks were not in order, or None when they were.

    In order: the sequences, in arrival order, never go down (a redelivery of the latest webhook-id,
    which Standard Webhooks allow, repeats its sequence; an earlier one arriving after a later one is out
    of order), every callback has one, each webhook-id keeps its sequence, and they run 1, 2, 3 … with no
    number missing (a missing one is a callback that never came)."""
    highest = 0
    seen: dict[str, int] = {}
    for _, kind, sequence, message_id in arrivals:
        if sequence is None:
            return f"{kind} {message_id} without a sequence"
        if seen.setdefault(message_id, sequence) != sequence:
            return f"{message_id} came with sequences {seen[message_id]} and {sequence}"
        if sequence < highest:
            return f"{kind} #{sequence} after #{highest}"
        highest = sequence
    numbers = set(seen.values())
    if numbers and numbers != set(range(1, highest + 1)):
        missing = sorted(set(range(1, highest + 1)) - numbers)
        return f"sequence {', '.join(map(str, missing))} never came (got {sorted(numbers)})"
    return None


def disorder(received: dict[str, Received]) -> dict[str, str]:
    """correlation id -> why its callbacks were out of order, for every task whose were."""
    found = {}
    for cid, got in received.items():
        if (why := order_fault(sorted(got.arrivals))) is not None:
            found[cid] = why
    return found


@dataclass(frozen=True)
class Recovery:
    """How long the cluster took to get over one fault (run seconds)."""

    fault: str
    at: float
    first_new: float | None  # fault -> the first task.completed of a job taken after it
    backlog: float | None  # fault -> the last task.completed of the jobs in flight at it
    in_flight: int  # jobs taken before the fault and not completed at it

    def line(self) -> str:
        return (
            f"[{self.at:7.1f}s] {self.fault}: the first job taken after it completed {_secs(self.first_new)} later;"
            f" the {self.in_flight} jobs in flight at it all completed {_secs(self.backlog)} later"
        )


def recovery(fault: str, at: float, accepted: dict[str, float], completed: dict[str, float]) -> Recovery:
    """``accepted``/``completed``: correlation id -> run seconds of its 202 / first task.completed."""
    after = [completed[c] for c, t in accepted.items() if t >= at and c in completed]
    in_flight = [c for c, t in accepted.items() if t < at and completed.get(c, float("inf")) >= at]
    backlog: float | None = 0.0 if not in_flight else None
    if in_flight and all(c in completed for c in in_flight):
        backlog = max(completed[c] for c in in_flight) - at
    return Recovery(fault, at, min(after) - at if after else None, backlog, len(in_flight))


def completions(received: dict[str, Received], t0: float) -> dict[str, float]:
    """correlation id -> run seconds of its first task.completed (``t0``: the run clock's monotonic zero)."""
    return {cid: got.completed_at - t0 for cid, got in received.items() if got.completed_at is not None}


@dataclass
class Verdict:
    scenario: str
    accounting: Accounting
    out_of_order: dict[str, str]
    unexpected_exits: list[str]
    recoveries: list[Recovery] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        acc = self.accounting
        return not (acc.lost or acc.doubled or acc.completed_twice or self.out_of_order or self.unexpected_exits)

    def summary(self) -> str:
        """The scenario's last line: the verdict, the counts, the times to recover."""
        acc = self.accounting
        recovered = "; ".join(f"{r.fault} {_secs(r.first_new)}/{_secs(r.backlog)}" for r in self.recoveries)
        return (
            f"{'PASS' if self.passed else 'FAIL'} {self.scenario}: {acc.jobs} jobs, {len(acc.lost)} lost, "
            f"{len(acc.doubled)} done twice at the vendor, {len(acc.completed_twice)} completed twice, "
            f"{len(self.out_of_order)} out of order, {len(self.unexpected_exits)} process exits"
            + (f"; recovered (first new completion/in-flight all done): {recovered}" if recovered else "")
        )


def completed_ids(received: dict[str, Received]) -> set[str]:
    return {cid for cid, got in received.items() if got.ids.get(COMPLETED)}


def _secs(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"
