"""The run's accounting: what the domain app, Liaison and the vendor each say happened to every job."""

from __future__ import annotations

import contextlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.chaos.domain import COMPLETED, Received
from bench.chaos.driver import Job, Refusal

FINAL = ("succeeded", "failed", "canceled")
SHOW = 20  # listed by name, per finding


@dataclass
class Accounting:
    jobs: int
    states: Counter[str]  # Liaison's state of each job's task
    final: int
    lost: list[str]  # never a task.completed at the domain app
    doubled: dict[str, int]  # correlation id -> vendor jobs, where more than one
    completed_twice: dict[str, list[str]]  # correlation id -> distinct task.completed webhook-ids
    redeliveries: int  # the same webhook-id again (allowed, skipped by id)
    not_succeeded: dict[str, str]  # correlation id -> final callback state other than succeeded
    details: dict[str, str] = field(default_factory=dict)  # correlation id -> what we know (lost ones)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.completed_twice)


def account(
    jobs: list[Job], states: dict[str, str], received: dict[str, Received], vendor_jobs: list[dict[str, Any]]
) -> Accounting:
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for vendor_job in vendor_jobs:
        job_input = vendor_job.get("input")
        if isinstance(job_input, dict) and isinstance(job_input.get("job"), str):
            by_job[job_input["job"]].append(vendor_job)
    names = [job.correlation_id for job in jobs]
    task_states = Counter(states.get(cid, "(no task)") for cid in names)
    lost, twice, not_succeeded, details = [], {}, {}, {}
    redeliveries = 0
    for job in jobs:
        cid = job.correlation_id
        got = received.get(cid) or Received()
        redeliveries += sum(n - 1 for n in got.deliveries.values())
        completed = sorted(got.ids.get(COMPLETED, ()))
        if len(completed) > 1:
            twice[cid] = completed
        if not completed:
            lost.append(cid)
            at_vendor = ", ".join(f"{v['job_id']} {v['status']}" for v in by_job.get(cid, [])) or "no vendor job"
            types = ", ".join(f"{t}×{len(ids)}" for t, ids in sorted(got.ids.items())) or "no callback"
            details[cid] = f"{job.kind}: Liaison {states.get(cid, '(no task)')}; vendor {at_vendor}; domain app {types}"
        elif got.state != "succeeded":
            not_succeeded[cid] = f"{job.kind}: {got.state}"
    doubled = {cid: len(v) for cid, v in by_job.items() if len({x["job_id"] for x in v}) > 1}
    return Accounting(
        jobs=len(jobs),
        states=task_states,
        final=sum(task_states[s] for s in FINAL),
        lost=lost,
        doubled=doubled,
        completed_twice=twice,
        redeliveries=redeliveries,
        not_succeeded=not_succeeded,
        details=details,
    )


def sweeps(worker_log: Path, wall0: float) -> list[tuple[float, int]]:
    """(run seconds, rows) of every outbox sweep that published something, from the worker's JSON log:
    rows left unpublished (broker down), held retries come due, and rows past the outbox lease."""
    found: list[tuple[float, int]] = []
    if not worker_log.exists():
        return found
    for line in worker_log.read_text(errors="replace").splitlines():
        if "outbox sweep published" not in line:
            continue
        with contextlib.suppress(ValueError, KeyError, AttributeError):
            entry = json.loads(line)
            rows = int(entry["event"].split("published ")[1].split()[0])
            at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp() - wall0
            found.append((at, rows))
    return found


def refusal_lines(refusals: Iterable[Refusal]) -> list[str]:
    """Submits that did not answer 202, grouped by what was down, with their statuses."""
    refusals = list(refusals)
    groups: dict[str, list[Refusal]] = defaultdict(list)
    for refusal in refusals:
        groups[" + ".join(sorted(refusal.down)) or "nothing"].append(refusal)
    lines = []
    for down, items in sorted(groups.items()):
        statuses = ", ".join(f"{s}×{n}" for s, n in Counter(r.status for r in items).most_common())
        jobs = len({r.correlation_id for r in items})
        lines.append(f"    while {down} down: {len(items)} ({statuses}) over {jobs} jobs")
    return lines


def listing(title: str, items: dict[str, Any] | list[str]) -> list[str]:
    names = list(items)
    lines = [f"  {title}:"] if names else []
    for cid in names[:SHOW]:
        lines.append(f"    {cid}: {items[cid]}" if isinstance(items, dict) else f"    {cid}")
    if len(names) > SHOW:
        lines.append(f"    ... and {len(names) - SHOW} more")
    return lines
