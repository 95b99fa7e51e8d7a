"""Benchmark: fair scheduling (issue 20, point 7). Prints figures; asserts nothing.

    .venv/bin/python bench/fairness.py                                  # redis, then rabbitmq; cases 1-4
    .venv/bin/python bench/fairness.py --broker redis --cases 1,4       # one broker, two cases
    .venv/bin/python bench/fairness.py --backlog 500 --priority-backlog 200 --cases 1,2   # a short run

Every case runs on a stack of its own: a fresh database on a PostgreSQL cluster of the benchmark's
own, a fresh broker (a Redis server of its own, or a new vhost on the machine's RabbitMQ), the lean
vendor (bench/lean_vendor.py) and Liaison from the Procfile's web, worker and relay lines
(bench/stacks.py's ``start_liaison``, whose UNLIMITED lifts the client limits, so a backlog goes in
as fast as ``--concurrency`` submitters send it). Two clients, A and B, are created in the stack's
database (``service.credentials.create_client``, each with its own callback secret); their callbacks
go to one lean domain app (bench/lean_domain.py, given both secrets) on a port that
LIAISON_OUTBOUND_ALLOW names. The stack's own client and domain app stay idle.

A latency is measured from the moment the driver got the task's 202 (``time.time()``) to

- 202 → vendor: the moment the lean vendor received the job's POST /jobs (its ``GET /received``:
  the job's input carries the correlation id);
- 202 → completed: the moment the domain app received the task's first ``task.completed``
  (its ``GET /completed/<id>``).

All three clocks are this machine's. 202 → vendor may be a few ms below zero: the web publishes the
submit before its 202 reaches the driver, and an idle worker can call the vendor first. The lean
vendor accepts a job 0.2 s after receiving it and completes it 0.1 s later: 202 → completed is never
below about 0.3 s. The figures, per broker:

1. Client B's latency (a) idle: the median of 3 tasks, one after another; (b) of one task submitted
   the moment after A's backlog of ``--backlog`` tasks (default 5000) got its last 202; (c) the
   same with the backlog held: while A submits it, the vendor answers every POST /jobs 1 s late
   (``answer_delay``), so Liaison's submitting processes wait on it and A's tasks queue in Liaison;
   the vendor answers at once again the moment before B submits. Why (c): on a small machine the
   submit path is the slowest stage, the pipeline keeps up with it, and in (b) little of the
   backlog is still queued when B submits. Beside (b) and (c): how many of A's jobs the vendor had
   received at B's 202 (the rest were queued ahead of or beside B) and before B's job, and when A's
   last task completed (the backlog is waited for before the next figure).
2. One task's latency, submitted right after ``--priority-backlog`` tasks (default 2000) of the same
   client (A): (a) as they come, (b) held, as in 1. A probe first submits one task with
   ``"priority": 1``: if the server takes it (202), the backlog has ``"priority": 3`` and the task
   ``"priority": 1``; if it refuses the field (422), neither has it, the table says priorities are
   not supported by this build, and the figure is plain FIFO (the "before" figure).
3. The most jobs open at the vendor at once (received and ``job.completed`` not yet sent, counted by
   the lean vendor) while 200 tasks of A run, with LIAISON_PROVIDER_BENCH_MAX_IN_FLIGHT=20 in the
   environment and the vendor completing each job 2 s after accepting it (``POST /settings``). With
   the cap it is at most 20; a build without one ignores the variable, and the figure shows how
   many it opens.
4. B's 202 → completed while A's callback endpoint trickles: A submits 6 tasks whose
   ``callback_url`` is a loopback tarpit (it reads the request, sends a status line, then one header
   line every 2 s, never ending the head); once the tarpit holds a connection, and 2 s later, B
   submits one task and A one with its normal callback URL. Both are printed beside B's idle
   latency on the same stack. Every relay setting is the build's own: each LIAISON_RELAY_* that
   UNLIMITED lifts (at c2fbd7d LIAISON_RELAY_CLIENT_CONCURRENCY=64) is passed back explicitly as
   the build's default, read from the foundation/setting_table.py of the tree this runs from (the
   row prints them), and LIAISON_RELAY_TIMEOUT_S is not set.

Every wait is bounded: by ``--timeout`` overall, and in cases 1-3 also by ``--stall-timeout`` (no
task of the stack completed for that long); case 4's waits by ``--trickle-timeout``. What timed out
is printed instead of its figure. The machine's other work makes every figure noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from bench import report
from bench.environment import broker
from bench.fairness_cases import CASES, Row
from bench.fairness_clients import Run, say
from bench.postgres_cluster import PostgresCluster
from bench.procs import ROOT


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.1f} s"


def table(kind: str, rows: list[Row], build: str) -> str:
    lines = [f"\n==== fairness on {kind} ({build})", f"  {'':<62}{'202 → vendor':>14}{'202 → completed':>17}"]
    for row in rows:
        if row.timing is not None:
            figures = f"{_seconds(row.timing.vendor_s):>14}{_seconds(row.timing.completed_s):>17}"
        else:
            figures = f"{row.value:>31}"
        lines.append(f"  {row.label:<62}{figures}")
        problem = [row.timing.problem] if row.timing is not None and row.timing.problem else []
        lines += [f"        {note}" for note in [*problem, *row.notes]]
    return "\n".join(lines)


def build_name() -> str:
    """The commit this runs from, the tracked files changed beside it, and now."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=False)
        return done.stdout

    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    changes = f" + local changes to {', '.join(changed)}" if changed else ""
    commit = git("rev-parse", "--short", "HEAD").strip() or "?"
    return f"commit {commit}{changes}; {datetime.now():%Y-%m-%d %H:%M}"


def run_broker(kind: str, args: argparse.Namespace, pg: PostgresCluster, logs: Path) -> list[Row]:
    rows: list[Row] = []
    for case in args.cases:
        title, measure = CASES[case]
        tag = f"{kind}-case{case}"
        say(f"\n== {kind}, case {case}: {title}")
        started = time.monotonic()
        try:
            with broker(kind) as (url, _):
                rows += measure(Run(pg, url, logs, tag, args))
        except (RuntimeError, TimeoutError, OSError, requests.RequestException) as exc:
            rows.append(Row(f"{case}   {title}", value="failed", notes=[str(exc)[:500]]))
        trouble = report.log_errors(logs, prefix=tag)
        say(f"  case {case} took {time.monotonic() - started:.0f} s; log lines that look like trouble: {len(trouble)}")
        for line in trouble[:5]:
            say(f"    {line}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--broker", choices=["redis", "rabbitmq", "both"], default="both", help="default: both")
    parser.add_argument("--cases", default="1,2,3,4", help="comma-separated, of 1 2 3 4 (default: all)")
    parser.add_argument("--backlog", type=int, default=5000, help="case 1: A's backlog (default 5000)")
    parser.add_argument("--priority-backlog", type=int, default=2000, help="case 2: the backlog (default 2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent submitters of a backlog (default 8)")
    parser.add_argument("--timeout", type=float, default=900, help="the longest of any wait (default 900 s)")
    parser.add_argument(
        "--stall-timeout", type=float, default=90, help="cases 1-3: a wait ends when no task completes this long (90 s)"
    )
    parser.add_argument("--trickle-timeout", type=float, default=240, help="case 4: the longest wait (default 240 s)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs (always kept on failure)")
    args = parser.parse_args()
    try:
        args.cases = sorted({int(c) for c in args.cases.split(",")})
        if not set(args.cases) <= set(CASES):
            raise ValueError
    except ValueError:
        parser.error("--cases takes numbers of 1 to 4, comma-separated")
    brokers = ["redis", "rabbitmq"] if args.broker == "both" else [args.broker]

    logs = Path(tempfile.mkdtemp(prefix="liaison-fairness-"))
    # as bench/e2e.py: Ctrl-C and SIGTERM unwind, so every finally stops its processes
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    build = build_name()
    say(f"{build}; load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    failed = True
    tables = []
    try:
        with PostgresCluster() as pg:
            say(f"PostgreSQL cluster of our own on :{pg.port}, logs of every process in {logs}")
            for kind in brokers:
                tables.append(table(kind, run_broker(kind, args, pg, logs), build))
                say(tables[-1])
        failed = any("failed" in t or "timed out" in t or "nothing completed" in t for t in tables)
    except KeyboardInterrupt:
        say("\ninterrupted: stopping every process")
    finally:
        if len(tables) > 1:
            say("\n".join(tables))
        say(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if failed or args.keep_logs:
            say(f"process logs kept in {logs}")
        else:
            shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
