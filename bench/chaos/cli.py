"""``bin/chaos``: the endurance run. Starts its own PostgreSQL cluster and redis-server, the Procfile's
web, worker, calls, relay, beat and vendor on them, and a domain app; drives the jobs while the chaos plan
breaks things; then prints what happened to every job. Exit 0 only with 0 lost, 0 doubled at the
vendor, 0 completed twice and 0 process exits (a process that ends on its own is started again, as a
supervisor would, so the run goes on, and counted: any fails the run)."""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from bench.chaos.domain import DomainApp
from bench.chaos.driver import Driver, make_jobs
from bench.chaos.platform import TUNING, Platform
from bench.chaos.report import account, sweeps
from bench.chaos.result import Measures, passed, render
from bench.chaos.schedule import Chaos
from bench.chaos.timeline import Timeline
from bench.postgres_cluster import PostgresCluster
from bench.services import RedisServer

PROGRESS_EVERY_S = 20.0
SETTLE_S = 10.0  # listening on after the last task.completed: a second one would show here


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bin/chaos",
        description="Endurance run: drive jobs of mixed behaviour through a whole Liaison while its worker, "
        "broker, database and vendor are killed, restarted and flapped; report lost and doubled work and the "
        "processes that exited on their own. Exit status 0 only with 0 lost, 0 doubled at the vendor, 0 completed "
        "twice and 0 process exits (the worker and calls processes the plan SIGKILLs on purpose do not count).",
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to submit (default 2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="threads submitting (default 8)")
    parser.add_argument("--rate", type=float, default=8.0, help="jobs submitted per second (default 8)")
    parser.add_argument("--seed", type=int, default=None, help="the job mix's and the chaos's seed (default: random)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds to wait, once every job is submitted, for the last task.completed (default 900)",
    )
    parser.add_argument(
        "--reconcile-every",
        type=float,
        default=30.0,
        help="ask for a reconcile run this often through the admin API (default 30 s; 0: only beat's, every 5 min)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the temporary folder with every process's log (kept on failure)"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.concurrency < 1 or args.rate <= 0:
        parser.error("--jobs and --concurrency must be at least 1, --rate above 0")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    return args


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM too: stop every process the run started, then exit


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    tmp = Path(tempfile.mkdtemp(prefix="liaison-chaos-"))
    timeline = Timeline()
    window_s = args.jobs / args.rate
    print(
        f"== bin/chaos: {args.jobs} jobs at {args.rate:g}/s over {args.concurrency} threads (~{window_s:.0f}s), "
        f"seed {args.seed}; logs in {tmp}/logs",
        flush=True,
    )
    for name, value, why in TUNING:
        print(f"   {name}={value}  # {why}", flush=True)
    ok = False
    with ExitStack() as stack:
        pg = PostgresCluster()
        stack.callback(pg.cleanup)
        stack.callback(_copy_logs, pg.log, tmp / "logs" / "postgres.log")
        pg.start()
        redis = RedisServer()
        stack.callback(redis.cleanup)
        stack.callback(_copy_logs, redis.dir / "redis.log", tmp / "logs" / "redis.log")
        redis.start()
        domain = DomainApp()
        stack.callback(domain.close)
        platform = Platform(tmp, pg, redis, domain.port)
        platform.configure(pg.create_database("liaison"))
        timeline.log(f"PostgreSQL :{pg.port} ({pg.dir}), redis-server :{redis.port}, domain app :{domain.port}")
        platform.migrate()
        stack.callback(platform.stop)
        platform.start()
        pids = ", ".join(f"{name} {proc.pid}" for name, proc in platform.procs.items())
        timeline.log(f"platform up: web {platform.web_url}, vendor {platform.vendor_url} ({pids})")
        api_key, secret = platform.create_client(domain.url)
        domain.serve(secret)

        jobs = make_jobs(args.jobs, args.seed, uuid.uuid4().hex[:6])
        measures = Measures(rss_start=platform.rss(), started=timeline.now())
        driver = Driver(platform.web_url, api_key, jobs, args.concurrency, args.rate, timeline)
        chaos = Chaos(platform, timeline, window_s, args.seed)
        driver.start()
        chaos.start()
        _follow(args, timeline, platform, driver, chaos, domain, len(jobs), measures)

        measures.rss_end = platform.rss()
        measures.ended = timeline.now()
        accounting = account(jobs, platform.task_states(api_key), domain.snapshot(), platform.vendor_jobs())
        measures.open_dead_letters = platform.open_items("/dead-letters")
        measures.open_incidents = platform.open_items("/incidents")
        measures.sweeps = sweeps(platform.logs / "worker.log", timeline.wall0)
        print(render(accounting, driver, domain, timeline, chaos, measures), flush=True)
        ok = passed(accounting, measures)
    if ok and not args.keep_logs:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"logs of every process: {tmp}/logs", flush=True)
    return 0 if ok else 1


def _follow(
    args: argparse.Namespace,
    timeline: Timeline,
    platform: Platform,
    driver: Driver,
    chaos: Chaos,
    domain: DomainApp,
    total: int,
    measures: Measures,
) -> None:
    """Until every job has its task.completed (and a little longer), or the timeout after the last submit."""
    last_progress = last_reconcile = time.monotonic()
    submitted_at: float | None = None
    while True:
        time.sleep(1.0)
        now = time.monotonic()
        completed = len(domain.completed())
        for restarted in platform.supervise():
            measures.unexpected_exits.append(restarted)
            timeline.log(f"UNEXPECTED: {restarted}")
        if driver.done() and submitted_at is None:
            submitted_at = now
            measures.submitted = timeline.now()
            timeline.log(f"all {len(driver.accepted)} jobs submitted")
        if args.reconcile_every and now - last_reconcile >= args.reconcile_every:
            last_reconcile = now
            platform.reconcile_now()
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            rss = {name: sum(kib) / 1024 for name, kib in platform.rss().items()}
            timeline.note(
                f"progress: {len(driver.accepted)}/{total} submitted, {completed} completed at the domain app, "
                f"{domain.callbacks} callbacks; RSS MiB worker {rss['worker']:.0f}, calls {rss['calls']:.0f},"
                f" relay {rss['relay']:.0f}"
            )
        if submitted_at is not None and not chaos.thread.is_alive():
            if completed >= total:
                timeline.log(f"all {total} jobs have their task.completed; listening {SETTLE_S:g}s more")
                time.sleep(SETTLE_S)
                return
            if now - submitted_at > args.timeout:
                missing = total - completed
                timeline.log(f"timeout: {missing} jobs without task.completed {args.timeout:g}s after the last submit")
                return


def _copy_logs(source: Path, target: Path) -> None:
    if source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


if __name__ == "__main__":
    sys.exit(main())
