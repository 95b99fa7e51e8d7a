"""The four cases of bench/fairness.py, each on a stack of its own (``CASES``: number → title and
measure): B behind A's backlog, a priority task behind its own client's backlog, the jobs open at a
vendor under a cap, B beside A's trickling callback endpoint. Each returns the rows of its table.
Apart from the entry point, which runs them per broker and prints the table."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fairness_clients import IDLE_SAMPLES, Bench, Run, Timing, idle, ids, say, timings, two_clients
from bench.fairness_tarpit import Tarpit
from bench.stacks import PROVIDER, UNLIMITED
from foundation.setting_table import SECTIONS

IN_FLIGHT_ENV = f"LIAISON_PROVIDER_{PROVIDER.upper()}_MAX_IN_FLIGHT"
IN_FLIGHT = 20
IN_FLIGHT_TASKS = 200
SLOW_COMPLETE_S = 2.0
HOLD_ANSWER_S = 1.0
TARPIT_TASKS = 6
TRICKLE_S = 2.0


def build_default(env: str) -> str:
    """A setting's default in the build this runs from (its foundation/setting_table.py)."""
    return next(option.default for section in SECTIONS for option in section.options if option.env == env)


@dataclass
class Row:
    label: str
    timing: Timing | None = None
    value: str = ""  # a figure that is not a latency (case 3)
    notes: list[str] = field(default_factory=list)


@dataclass
class Backlog:
    """A backlog of ``size`` tasks of ``client`` (with ``extra`` in each body), then one task
    measured: ``cid`` of ``measured_by`` (with ``measured_extra``). ``held``: the vendor answers
    POST /jobs HOLD_ANSWER_S late while the backlog goes in, so it queues in Liaison."""

    client: str
    size: int
    extra: dict[str, Any]
    measured_by: str
    cid: str
    measured_extra: dict[str, Any]
    held: bool


def behind(bench: Bench, backlog: Backlog, concurrency: int) -> tuple[Timing, list[str]]:
    """Submit the backlog, then the measured task the moment after; wait for it, then for the whole
    backlog. (its timing, notes: how the backlog went in, how much of it the vendor had received at
    the measured task's 202 and before its job, when the backlog's last task completed)."""
    how = f"the vendor answering {HOLD_ANSWER_S:.0f} s late" if backlog.held else "the pipeline running"
    say(f"  {backlog.client.upper()} submits {backlog.size} tasks from {concurrency} submitters, {how}")
    cids = ids(f"{backlog.client}-before-{backlog.cid}", backlog.size)
    if backlog.held:
        bench.vendor("/settings", {"answer_delay": HOLD_ANSWER_S})
    took, refused = bench.submit_many(backlog.client, cids, backlog.extra, concurrency)
    if backlog.held:
        bench.vendor("/settings", {"answer_delay": 0})
    at = bench.submit(backlog.measured_by, backlog.cid, backlog.measured_extra)
    timing = timings(bench, {backlog.cid: at})[backlog.cid]
    received = bench.received()
    seen = f"the vendor had received {sum(received.get(c, at) < at for c in cids)} of them at the measured task's 202"
    if (measured_at := received.get(backlog.cid)) is not None:
        seen += f", {sum(received.get(c, measured_at) < measured_at for c in cids)} before its job"
    notes = [f"backlog: {len(cids)} tasks submitted in {took:.1f} s ({refused} not answered 202), {how}", seen]
    if problem := bench.drain():
        return timing, [*notes, problem]
    arrivals = bench.http.get(bench.domain_url + "/report", timeout=60).json()["completed"]
    last = max(arrivals[c][0] for c in cids if c in arrivals)
    return timing, [*notes, f"the backlog's last task.completed came {last - at:.1f} s after the measured task's 202"]


def case_backlog(run: Run) -> list[Row]:
    n = run.args.backlog
    rows = []
    with two_clients(run) as bench:
        rows.append(Row(f"1a  B, idle (median of {IDLE_SAMPLES})", idle(bench, "b")))
        for row, held in (("1b", False), ("1c", True)):
            timing, notes = behind(bench, Backlog("a", n, {}, "b", f"b-{row}", {}, held), run.args.concurrency)
            rows.append(Row(f"{row}  B, right after A's {'held ' if held else ''}backlog of {n}", timing, notes=notes))
    return rows


def case_priority(run: Run) -> list[Row]:
    n = run.args.priority_backlog
    rows = []
    with two_clients(run) as bench:
        probe = bench.post(bench.http, "a", "a-probe", {"priority": 1})
        supported = probe.status_code == 202
        if not supported and not (probe.status_code == 422 and "priority" in probe.text):
            raise RuntimeError(f"the priority probe answered {probe.status_code}: {probe.text[:300]}")
        if supported:
            bench.expected += 1
            say("  the server takes a priority field: backlog priority 3, the task priority 1")
        else:
            say(f"  the server refuses a priority field (422: {probe.text[:200]}): no priorities")
        low, high = ({"priority": 3}, {"priority": 1}) if supported else ({}, {})
        what = f"A's priority-1 task after {n} priority-3 of A" if supported else f"A's task after {n} of A (FIFO)"
        for row, held in (("2a", False), ("2b", True)):
            timing, notes = behind(bench, Backlog("a", n, low, "a", f"a-{row}", high, held), run.args.concurrency)
            if not supported:
                notes.insert(0, "priorities are not supported by this build: it refused the field (422)")
            rows.append(Row(f"{row}  {what}{', held' if held else ''}", timing, notes=notes))
    return rows


def case_in_flight(run: Run) -> list[Row]:
    args = run.args
    with two_clients(run, {IN_FLIGHT_ENV: str(IN_FLIGHT)}) as bench:
        settings = bench.vendor("/settings", {"complete_delay": SLOW_COMPLETE_S})
        say(f"  vendor slowed: {settings}; A submits {IN_FLIGHT_TASKS} tasks from {args.concurrency} submitters")
        started = time.monotonic()
        took, refused = bench.submit_many("a", ids("a-open", IN_FLIGHT_TASKS), {}, args.concurrency)
        problem = bench.drain()
        done_s = time.monotonic() - started
        most = bench.vendor("/healthz")["max_open"]
    notes = [
        f"{IN_FLIGHT_ENV}={IN_FLIGHT} in the environment (a cap keeps this at most {IN_FLIGHT})",
        f"{IN_FLIGHT_TASKS} tasks of A (submitted in {took:.1f} s, {refused} not answered 202); the vendor sends"
        f" job.completed {SLOW_COMPLETE_S:.0f} s after accepting a job",
        problem or f"every task completed {done_s:.1f} s after the first submit",
    ]
    return [Row("3   most jobs open at the vendor at once", value=str(most), notes=notes)]


def case_trickle(run: Run) -> list[Row]:
    args = run.args
    shipped = {key: build_default(key) for key in UNLIMITED if key.startswith("LIAISON_RELAY_")}
    tarpit = Tarpit(TRICKLE_S)
    try:
        with two_clients(run, shipped, allow=(tarpit.port,)) as bench:
            quiet = idle(bench, "b")
            bench.stall_s = None  # nothing completes while the tarpit holds A: --trickle-timeout bounds the waits
            say(f"  A submits {TARPIT_TASKS} tasks whose callback_url is the tarpit")
            for cid in ids("a-tarpit", TARPIT_TASKS):
                bench.submit("a", cid, {"callback_url": f"{tarpit.url}/{cid}"}, awaited=False)
            problem = bench.wait(lambda: tarpit.held > 0, "a callback at the tarpit", args.trickle_timeout)
            if problem:
                raise RuntimeError(problem)
            time.sleep(TRICKLE_S)
            say(f"  the tarpit holds {tarpit.held} connection(s): B submits one task, then A one")
            sent = {cid: bench.submit(client, cid) for client, cid in (("b", "b-beside"), ("a", "a-normal"))}
            measured = timings(bench, sent, args.trickle_timeout)
            held = f"the tarpit accepted {tarpit.accepted} connections, held {tarpit.most_held} at most"
    finally:
        tarpit.close()
    setting = f"{' '.join(f'{k}={v}' for k, v in shipped.items())} (the build's defaults); relay timeout the default"
    return [
        Row(f"4a  B, idle (median of {IDLE_SAMPLES})", quiet),
        Row(f"4b  B, while {TARPIT_TASKS} callbacks of A trickle", measured["b-beside"], notes=[setting, held]),
        Row("4c  A's normal callback, while its other callbacks trickle", measured["a-normal"]),
    ]


CASES: dict[int, tuple[str, Callable[[Run], list[Row]]]] = {
    1: ("B's latency, idle and behind A's backlog", case_backlog),
    2: ("a priority-1 task behind a backlog of its own client", case_priority),
    3: ("most jobs open at the vendor with a cap of 20", case_in_flight),
    4: ("B's latency while A's callback endpoint trickles", case_trickle),
}
