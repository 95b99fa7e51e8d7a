"""Benchmark: what each step of one job costs, alone, in one process, for Liaison and the naive pipeline.

    .venv/bin/python bench/hot_paths.py                        # 500 jobs each, its own PostgreSQL cluster and Redis
    .venv/bin/python bench/hot_paths.py --only liaison --profile relay     # and the relay's cProfile top 30

Where ``bench/e2e.py`` measures the whole platform under load (every process sharing two cores),
this runs each hot path alone, one call after another on one thread. For each job, in order:

- ``submit``: ``POST /api/v1/tasks`` through the Flask app (a test client, no HTTP server: the
  view, authentication, the submit limits, the transaction, the publish to the broker);
- ``submission``: the ``liaison.submit`` task body against a stub vendor that answers a job id;
- ``accepted`` and ``completed``: the vendor's two signed webhooks, ``POST /webhooks/<provider>``;
- ``relay``: the ``liaison.relay`` task body, twice (each callback to a stub domain app);

and the same steps of the naive pipeline (bench/naive/: its views and its task bodies).

Per call it prints the CPU time of this process (ms; the stub vendor and domain app run in it too,
and count), the SQL statements sent, and the Python function calls made on the calling thread
(the stubs' threads are not counted), with the calls of every step by package. CPU time on a shared
host drifts by a fifth within minutes; the call counts repeat exactly, so they are what tells a
change in the code's own work from the machine's. The PostgreSQL server's CPU (``pg ms``) is that of
the bench's own cluster while the step runs, read from ``/proc/<pid>/schedstat`` (nanoseconds): one
step at a time, with nothing else on the server, so it is the server's work for that step alone
(``bench/e2e.py`` has it under load). Celery task bodies are called in this process, not through a worker:
the task's code, not Celery's, is measured (the broker still receives every publish). Nothing here
is a test; nothing asserts a figure (docs/benchmarks.md, "Step 3", reads them).
"""

from __future__ import annotations

import argparse
import functools
import pstats
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.environment import PG_SETTINGS
from bench.hot_paths_meter import STEPS, Meter, server_cpu_seconds
from bench.hot_paths_pipelines import run_liaison, run_naive, stub_server
from bench.postgres_cluster import PostgresCluster
from bench.services import RedisServer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs", type=int, default=500, help="timed jobs (default 500; a tenth, at most 50, warm up first)"
    )
    parser.add_argument("--count-jobs", type=int, default=20, help="more jobs, to count Python calls (default 20)")
    parser.add_argument("--only", choices=("liaison", "naive"), help="one pipeline only")
    parser.add_argument("--profile", choices=STEPS, help="print Liaison's cProfile of this step (top 30)")
    args = parser.parse_args()

    with PostgresCluster(PG_SETTINGS) as pg, RedisServer() as redis, stub_server() as stub:
        assert pg.pid is not None
        server_cpu = functools.partial(server_cpu_seconds, pg.pid)
        meters = {}
        if args.only != "naive":
            meters["liaison"] = run_liaison(args, pg.create_database("hot_liaison"), redis.url, stub, server_cpu)
        if args.only != "liaison":
            meters["naive"] = run_naive(args, pg.create_database("hot_naive"), redis.url, stub, server_cpu)
    report(args, meters)


def report(args: argparse.Namespace, meters: dict[str, Meter]) -> None:
    print(f"{args.jobs} jobs each, after a warm-up; per call: CPU ms of this process (CPU), of the PostgreSQL")
    print(f"server (pg), and statements; Python function calls per call, counted over {args.count_jobs} more jobs")
    names = list(meters)
    print("  " + f"{'step':12}" + "".join(f" | {name:>8} CPU ms  pg ms  stmts  py calls" for name in names))
    for step in (*STEPS, "per job"):
        line = f"  {step:12}"
        for name in names:
            meter = meters[name]
            if step == "per job":
                cpu, server, stmts, calls = meter.per_job(args)
            else:
                cpu, server, stmts, calls = meter.per_call(step)
            line += f" | {cpu:15.3f} {server:6.3f} {stmts:6.1f} {calls:9.0f}"
        print(line)
    print("\nPython calls per job by the package whose code ran them (werkzeug: the test client and the views)")
    modules = Counter[str]()
    for meter in meters.values():
        modules.update(meter.by_module)
    print("  " + f"{'package':18}" + "".join(f" {name:>9}" for name in names))
    for module, _ in modules.most_common(16):
        print(
            "  "
            + f"{module:18}"
            + "".join(f" {meters[name].by_module[module] / args.count_jobs:9.0f}" for name in names)
        )
    liaison = meters.get("liaison")
    if liaison is not None and liaison.profiler is not None:
        print(f"\n== cProfile of Liaison's {args.profile}")
        stats = pstats.Stats(liaison.profiler)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
