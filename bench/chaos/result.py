"""The printed report: the counts the issue asks for first, then what explains them."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench.chaos.domain import DomainApp
from bench.chaos.driver import Driver
from bench.chaos.report import Accounting, listing, refusal_lines
from bench.chaos.schedule import Chaos
from bench.chaos.timeline import Timeline


@dataclass
class Measures:
    rss_start: dict[str, list[int]]  # name -> KiB per process of its tree, main first
    started: float  # run seconds when the first job went out
    submitted: float | None = None
    ended: float | None = None
    rss_end: dict[str, list[int]] = field(default_factory=dict)
    open_dead_letters: Counter[str] = field(default_factory=Counter)
    open_incidents: Counter[str] = field(default_factory=Counter)
    unexpected_exits: list[str] = field(default_factory=list)  # each one fails the run
    sweeps: list[tuple[float, int]] = field(default_factory=list)  # (run seconds, rows published)


def passed(acc: Accounting, measures: Measures) -> bool:
    """The run's verdict: nothing lost, doubled or completed twice, and no process exited on its own
    (a broker restart, a database restart or a vendor outage must not end one: issue 41.1)."""
    return acc.ok and not measures.unexpected_exits


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def _tree(kib: list[int]) -> str:
    """Sum of a process tree's RSS, then each process's (main first)."""
    return f"{_mib(sum(kib))} (" + " + ".join(f"{k / 1024:.0f}" for k in kib) + ")"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counter.most_common()) or "none"


def _latency(driver: Driver, domain: DomainApp, timeline: Timeline) -> str:
    """Seconds from a job's 202 to its task.completed at the domain app."""
    spans = sorted(
        got.completed_at - timeline.t0 - driver.accepted[cid]
        for cid, got in domain.snapshot().items()
        if got.completed_at is not None and cid in driver.accepted
    )
    if not spans:
        return "no task.completed"
    p95 = spans[min(len(spans) - 1, int(len(spans) * 0.95))]
    return f"median {statistics.median(spans):.1f}s, p95 {p95:.1f}s, max {spans[-1]:.1f}s"


def render(
    acc: Accounting, driver: Driver, domain: DomainApp, timeline: Timeline, chaos: Chaos, measures: Measures
) -> str:
    broker_down = [r for r in driver.refusals if "broker" in r.down]
    broker_statuses = ", ".join(f"{s}×{n}" for s, n in Counter(r.status for r in broker_down).most_common())
    submitted = measures.submitted if measures.submitted is not None else timeline.now()
    ended = measures.ended if measures.ended is not None else timeline.now()
    lines = [
        "",
        "== result",
        f"jobs final:                 {acc.final}/{acc.jobs} ({_counts(acc.states)})",
        f"lost:                       {len(acc.lost)}  (no task.completed at the domain app)",
        f"doubled at the vendor:      {len(acc.doubled)}  (more than one vendor job for one task)",
        f"completed twice:            {len(acc.completed_twice)}  (task.completed under two webhook-ids;"
        f" redeliveries of one webhook-id: {acc.redeliveries}, allowed)",
        f"processes that exited:      {len(measures.unexpected_exits)}  (a Procfile process that ended on its own)",
        f"submits not 202 while the broker was down: {len(broker_down)}"
        + (f" ({broker_statuses}); each retried with its Idempotency-Key until taken" if broker_down else ""),
    ]
    lines.append(f"  every submit that did not answer 202: {len(driver.refusals)}")
    lines += refusal_lines(driver.refusals)
    answers = _counts(Counter({str(status): n for status, n in driver.answers.items()}))
    lines.append(
        f"  jobs taken: {len(driver.accepted)}/{acc.jobs} (answered {answers})"
        f"; 429s waited out: {driver.throttled}; refused with a 4xx: {len(driver.rejected)}"
    )
    for name, start in measures.rss_start.items():
        end = measures.rss_end.get(name, [])
        note = " (its third incarnation: killed twice)" if name in ("worker", "calls") else ""
        lines.append(f"{name + ' RSS:':<28}start {_tree(start)}, end {_tree(end)}{note}")
    lines += [
        f"duration:                   {ended - measures.started:.1f}s (submitting {submitted - measures.started:.1f}s)",
        f"202 -> task.completed:      {_latency(driver, domain, timeline)}",
        f"callbacks received:         {domain.callbacks} ({domain.bad_signatures} with a bad signature)",
        f"final state at the domain app other than succeeded: {len(acc.not_succeeded)}",
        f"outbox sweep published:     {sum(n for _, n in measures.sweeps)} rows"
        + (" (" + ", ".join(f"{n} at {at:.0f}s" for at, n in measures.sweeps) + ")" if measures.sweeps else ""),
        f"open dead letters:          {_counts(measures.open_dead_letters)}",
        f"open incidents:             {_counts(measures.open_incidents)}",
    ]
    lines += listing("lost", acc.details)
    lines += listing("doubled at the vendor (vendor jobs)", {k: str(v) for k, v in acc.doubled.items()})
    lines += listing("completed twice (webhook-ids)", {k: " ".join(v) for k, v in acc.completed_twice.items()})
    lines += listing("not succeeded", acc.not_succeeded)
    if measures.unexpected_exits:
        lines += [
            "  processes that exited on their own (each fails the run; restarted, as a supervisor would, so the"
            " run goes on and its work can still be counted):",
            *(f"    {e}" for e in measures.unexpected_exits),
        ]
    if chaos.failures:
        lines += ["  chaos actions that failed:", *(f"    {f}" for f in chaos.failures)]
    lines += ["", "== chaos event log", *(f"[{at:7.1f}s] {text}" for at, text in timeline.events)]
    verdict = "PASS" if passed(acc, measures) else "FAIL"
    lines += [
        "",
        f"{verdict}: {len(acc.lost)} lost, {len(acc.doubled)} doubled at the vendor, "
        f"{len(acc.completed_twice)} completed twice, {len(measures.unexpected_exits)} process exits",
    ]
    return "\n".join(lines)
