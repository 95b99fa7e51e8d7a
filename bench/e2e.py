"""Benchmark: Liaison end to end against a naive pipeline. Prints figures; asserts nothing (the
targets of issue 10 are printed beside them, never tested).

    .venv/bin/python bench/e2e.py                                  # redis, then rabbitmq; 1000 jobs, C=8, 2 rounds
    .venv/bin/python bench/e2e.py --broker redis --jobs 1000 --concurrency 8 --rounds 1
    .venv/bin/python bench/e2e.py --broker redis --scale-out       # Liaison with 1 and with 2 worker hosts
    .venv/bin/python bench/e2e.py --mode ingest --broker redis     # signed-webhook ingest vs a bare Flask POST
    .venv/bin/python bench/e2e.py --broker redis --only liaison --otlp   # Liaison with tracing off, then on

Pipeline mode starts, per run, a fresh database on a PostgreSQL cluster of its own (with
pg_stat_statements), a fresh broker (a Redis server of its own, or a RabbitMQ vhost on the
machine's server), a lean vendor (bench/lean_vendor.py), a lean domain app that verifies every
callback with standardwebhooks (bench/lean_domain.py), and then the Procfile's web, worker and relay
(or the naive pipeline of bench/naive/ with the same command lines). Runs alternate Liaison and
naive. With ``--otlp`` each round also runs Liaison with ``OTEL_EXPORTER_OTLP_ENDPOINT`` naming an
OTLP/HTTP receiver of the benchmark's own (tests/support/otlp.py, counting spans), right after the
run without it. docs/benchmarks.md says what every figure means.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report
from bench.driver import RunResult, run_jobs
from bench.environment import PG_SETTINGS, broker
from bench.ingest import ingest
from bench.postgres_cluster import PostgresCluster
from bench.procs import bench_run, load_average
from bench.stacks import Stack, start_liaison, start_naive
from tests.support.otlp import OtlpReceiver

TRACED = "liaison traced"


def say(line: str) -> None:
    print(line, flush=True)


def one_run(
    args: argparse.Namespace,
    pg: PostgresCluster,
    broker_kind: str,
    kind: str,
    workers: int,
    logs: Path,
    n: int,
    receiver: OtlpReceiver | None = None,
) -> RunResult:
    """One run of ``kind``: ``naive``, ``liaison``, or ``liaison traced`` (exporting to ``receiver``)."""
    hosts = "1 worker host" if workers == 1 else f"{workers} worker hosts"
    label = kind if kind == "naive" else f"{kind} ({hosts})"
    say(f"\n== run {n}: {label} on {broker_kind}")
    tag = f"run{n}-{kind.replace(' ', '-')}"
    spans_before = receiver.count if receiver is not None else 0
    with broker(broker_kind) as (url, redis_pid):
        if kind == TRACED:
            assert receiver is not None
            otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
            stack: Stack = start_liaison(pg, url, logs, workers=workers, tag=tag, extra_env=otel)
        elif kind == "liaison":
            stack = start_liaison(pg, url, logs, workers=workers, tag=tag)
        else:
            stack = start_naive(pg, url, logs, tag=tag)
        try:
            result = run_jobs(
                stack,
                pg,
                broker_kind,
                redis_pid,
                label,
                args.jobs,
                args.concurrency,
                args.stall_timeout,
                say,
                args.top_statements,
            )
        finally:
            stack.stop()
    say(report.run_table(result))
    if kind == TRACED and receiver is not None:
        spans = receiver.count - spans_before
        per_job = spans / max(result.completed, 1)
        say(f"  spans exported to the OTLP receiver: {spans} ({per_job:.1f} per completed job)")
    trouble = report.log_errors(logs, prefix=tag)
    say(f"  log lines that look like trouble: {len(trouble)}" + "".join(f"\n    {line}" for line in trouble[:10]))
    return result


def plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(pipeline, worker hosts) of one round, in order."""
    if args.only == "naive":
        return [("naive", 1)]
    liaison = [("liaison", 1), ("liaison", 2)] if args.scale_out else [("liaison", args.workers)]
    if args.otlp:
        liaison += [(TRACED, hosts) for _, hosts in liaison]
    return liaison if args.only == "liaison" else [*liaison, ("naive", 1)]


def pipeline(args: argparse.Namespace, logs: Path) -> None:
    with PostgresCluster(PG_SETTINGS) as pg, OtlpReceiver(keep=False) as receiver:
        say(f"PostgreSQL cluster of our own on :{pg.port}, logs of every process in {logs}")
        if args.otlp:
            say(f"OTLP/HTTP receiver of our own on {receiver.url} (spans counted, not kept)")
        n = 0
        for broker_kind in args.broker:
            results: list[RunResult] = []
            for round_no in range(args.rounds):
                say(f"\n#### {broker_kind}, round {round_no + 1} of {args.rounds}")
                for kind, workers in plan(args):
                    n += 1
                    results.append(one_run(args, pg, broker_kind, kind, workers, logs, n, receiver))
            say(report.summary(broker_kind, results))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mode", choices=["pipeline", "ingest"], default="pipeline", help="default: pipeline")
    parser.add_argument(
        "--broker", choices=["redis", "rabbitmq"], action="append", help="repeatable; default: redis, then rabbitmq"
    )
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per run (default 1000)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent submitters (default 8)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating liaison/naive rounds (default 2)")
    parser.add_argument("--workers", type=int, choices=[1, 2], default=1, help="Liaison worker hosts (default 1)")
    parser.add_argument("--scale-out", action="store_true", help="run Liaison with 1 and with 2 worker hosts")
    parser.add_argument("--only", choices=["liaison", "naive"], help="run one pipeline only")
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="also run Liaison with tracing on (exporting to an OTLP receiver of our own), after each run without",
    )
    parser.add_argument(
        "--stall-timeout", type=float, default=60, help="end a run when no job completes for this long (default 60 s)"
    )
    parser.add_argument("--requests", type=int, default=4000, help="ingest: requests per case (default 4000)")
    parser.add_argument("--driver-procs", type=int, default=2, help="ingest: driver processes (default 2)")
    parser.add_argument(
        "--top-statements",
        type=int,
        default=0,
        help="print the N SQL statements that took PostgreSQL longest in each run",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs (always kept on failure)")
    args = parser.parse_args()
    args.broker = args.broker or ["redis", "rabbitmq"]

    logs = Path(tempfile.mkdtemp(prefix="liaison-bench-"))
    say(f"load average at start: {load_average()} ({os.cpu_count()} CPUs)")
    with bench_run(logs, args.keep_logs, say):
        if args.mode == "ingest":
            ingest(args, logs, say)
        else:
            pipeline(args, logs)


if __name__ == "__main__":
    main()
