"""Capacity figures: what one job costs each Liaison process class and PostgreSQL, and the
connections one host holds, measured end to end; then the capacity model derived from them (where
one PostgreSQL primary tops out, how many hosts a rate needs). Prints figures; asserts nothing.

    .venv/bin/python bench/capacity.py                              # redis, then rabbitmq; 400 jobs, 2 runs each
    .venv/bin/python bench/capacity.py --broker redis --jobs 300 --runs 3
    .venv/bin/python bench/capacity.py --primary-cores 4 --primary-cores 16 --target-rate 500

Each run, as bench/e2e.py's (docs/benchmarks.md): a PostgreSQL cluster of our own with
pg_stat_statements, a fresh database and broker (a redis-server of our own, or a fresh vhost on the
machine's RabbitMQ), the lean vendor and domain app, and the Procfile's ``web``, ``worker``,
``calls``, ``relay`` and ``beat`` lines as they are, the client's limits lifted. A warm-up of 2×C
jobs, then C threads submit N jobs; the run ends when every ``task.completed`` reached the domain
app. Measured over the run:

- jobs/s end to end (first submit → last job's ``task.completed``): the figure the machine's other
  load moves most;
- CPU seconds per job of each process class (``/proc/<pid>/stat`` utime + stime of the class's
  process trees, reaped children included, before and after) and of PostgreSQL (the postmaster's
  tree: every backend and background process); CPU per job moves far less with the machine's load;
- statements per job (pg_stat_statements, top level, BEGIN/COMMIT/ROLLBACK left out) and commits
  per job (pg_stat_database ``xact_commit`` of the run's database, read after the processes exit);
- connections per class at steady state (sampled every half second while the second quarter to
  the end of the submits run): the TCP sockets each class's processes hold to PostgreSQL and to the
  broker (``/proc/<pid>/fd`` against ``/proc/net/tcp``), the run's rows in ``pg_stat_activity``,
  and how many of those are busy (active or idle in transaction: transactions in flight).

bench/capacity_model.py holds the formulae; the runbook's "Capacity model" the figures and what to
do past the ceiling.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
import requests

from bench import capacity_model as model
from bench.driver import PgCounters, RunResult, broker_roots, completed_count, submit_all, wait_completed
from bench.environment import PG_SETTINGS, broker
from bench.postgres_cluster import PostgresCluster
from bench.procs import bench_run, load_average, process_table, tree, usage
from bench.report import log_errors
from bench.stacks import LIAISON_WORKERS, PROCFILE, PROVIDER, Stack, start_liaison
from models.db import POOL_SIZE

#: The Procfile lines a run starts, by class (beat: one per deployment, not per host)
CLASSES = ("web", *LIAISON_WORKERS, "beat")
HOST_CLASSES = ("web", *LIAISON_WORKERS)
#: Measured beside them: PostgreSQL and the broker (what Liaison drives), the bench's own helpers
OTHERS = ("postgres", "broker", "vendor", "domain")
AMQP_PORT = 5672
#: bench.stacks.UNLIMITED lifts the rates to a million a second with bursts of a million: a GCRA
#: tolerance of one second. A submit whose thread read its clock and then waited more than that for
#: the client's rate row (another submit holding it, on a machine loaded ten times over) was refused
#: with a 429 although the bucket was all but empty, and a warm-up job never came. Bursts of a
#: billion tolerate a thousand seconds.
WIDE_BURSTS = {
    "LIAISON_CLIENT_SUBMIT_BURST": "1000000000",
    f"LIAISON_PROVIDER_{PROVIDER.upper()}_RATE_LIMIT_BURST": "1000000000",
}
#: TCP_ESTABLISHED in /proc/net/tcp's ``st`` column
ESTABLISHED = "01"


def say(line: str) -> None:
    print(line, flush=True)


# --- sockets: which process holds a connection to which port ---------------------------------


def parse_proc_net_tcp(text: str) -> dict[int, tuple[int, str]]:
    """inode → (remote port, state) of each socket in a /proc/net/tcp (or tcp6) table."""
    found = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        found[int(fields[9])] = (remote_port, fields[3])
    return found


def tcp_table() -> dict[int, tuple[int, str]]:
    table: dict[int, tuple[int, str]] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):  # no IPv6 here
            table.update(parse_proc_net_tcp(Path(name).read_text()))
    return table


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """The socket inodes the processes ``pids`` hold open (a socket shared by a fork counts once)."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def connections_to(inodes: set[int], port: int, table: dict[int, tuple[int, str]]) -> int:
    return sum(1 for inode in inodes if table.get(inode, (0, ""))[0] == port and table[inode][1] == ESTABLISHED)


# --- one run --------------------------------------------------------------------------------------


@dataclass
class Sample:
    pg: dict[str, int]  # class → connections to PostgreSQL
    broker: dict[str, int]  # class → connections to the broker
    activity: int  # the run database's rows in pg_stat_activity
    busy: int  # of them active or idle in transaction


@dataclass
class CapacityRun:
    broker: str
    jobs: int
    completed: int = 0
    submitted: int = 0
    submit_errors: int = 0
    window_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # class or other → CPU seconds over the run
    driver_cpu_s: float = 0.0
    statements: int = 0
    commit_statements: int = 0
    commits: int = 0  # xact_commit
    sessions: int = 0
    samples: list[Sample] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def jobs_per_s(self) -> float:
        return self.completed / self.window_s if self.window_s else 0.0

    def ms(self, kind: str) -> float:
        return self.cpu_s.get(kind, 0.0) * 1000 / max(self.completed, 1)

    def per_job(self, count: int) -> float:
        return count / max(self.completed, 1)

    def liaison_ms(self) -> dict[str, float]:
        return {cls: self.ms(cls) for cls in HOST_CLASSES}

    def steady(self, pick: Callable[[Sample], float]) -> float:
        """The largest of a figure over the steady-state samples (pools keep what they opened)."""
        return max((pick(s) for s in self.samples), default=0.0)

    def pg_conns(self, *classes: str) -> float:
        """PostgreSQL connections ``classes`` held together at steady state."""
        return self.steady(lambda s: sum(s.pg.get(c, 0) for c in classes))

    def broker_conns(self, *classes: str) -> float:
        return self.steady(lambda s: sum(s.broker.get(c, 0) for c in classes))

    def mean_busy(self) -> float:
        return statistics.fmean(s.busy for s in self.samples) if self.samples else 0.0


def classes_of(stack: Stack, tag: str) -> dict[str, list[int]]:
    """Process class → root pids (the Proc names are ``<tag>-<Procfile line>``)."""
    found: dict[str, list[int]] = {cls: [] for cls in CLASSES}
    for proc in stack.procs.get("web", []) + stack.procs.get("worker", []):
        cls = proc.name.removeprefix(f"{tag}-")
        found.setdefault(cls, []).append(proc.pid)
    return found


class Sampler(threading.Thread):
    """Every ``every`` s while ``active()``: connections per class, and the database's activity."""

    def __init__(
        self,
        classes: dict[str, list[int]],
        pg: PostgresCluster,
        database: str,
        broker_port: int,
        active: Callable[[], bool],
        done: threading.Event,
        every: float = 0.5,
    ) -> None:
        super().__init__(daemon=True)
        self.classes, self.database, self.broker_port = classes, database, broker_port
        self.pg_port = pg.port
        self.admin_url = pg.admin_url
        self.active, self.done, self.every = active, done, every
        self.samples: list[Sample] = []
        self.own_cpu_s = 0.0  # what our sampling connection's backend cost PostgreSQL: not a job's

    def run(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self.done.wait(self.every):
                if self.active():
                    self.samples.append(self.sample(conn))
            self.own_cpu_s = usage([conn.info.backend_pid]).cpu_s

    def sample(self, conn: psycopg.Connection[Any]) -> Sample:
        procs = process_table()
        tcp = tcp_table()
        pg, brk = {}, {}
        for cls, roots in self.classes.items():
            inodes = socket_inodes(tree(roots, procs))
            pg[cls] = connections_to(inodes, self.pg_port, tcp)
            brk[cls] = connections_to(inodes, self.broker_port, tcp)
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE state IN ('active', 'idle in transaction',"
            " 'idle in transaction (aborted)')) FROM pg_stat_activity WHERE datname = %s",
            [self.database],
        ).fetchone()
        return Sample(pg, brk, int(row[0]) if row else 0, int(row[1]) if row else 0)


def broker_port(kind: str, url: str) -> int:
    if kind == "redis":
        return urlsplit(url).port or 0
    return AMQP_PORT


def one_run(args: argparse.Namespace, pg: PostgresCluster, kind: str, logs: Path, n: int) -> CapacityRun:
    tag = f"cap{n}"
    say(f"\n== run {n}: Liaison on PostgreSQL + {kind}, {args.jobs} jobs, C={args.concurrency}")
    result = CapacityRun(kind, args.jobs)
    load0 = os.getloadavg()[0]
    with broker(kind) as (url, redis_pid):
        stack = start_liaison(pg, url, logs, tag=tag, processes=(*LIAISON_WORKERS, "beat"), extra_env=WIDE_BURSTS)
        try:
            measure(args, stack, pg, kind, url, redis_pid, tag, result)
        finally:
            stack.stop()
    result.load = (load0, os.getloadavg()[0])
    say(run_table(result))
    trouble = log_errors(logs, prefix=tag)
    say(f"  log lines that look like trouble: {len(trouble)}" + "".join(f"\n    {line}" for line in trouble[:10]))
    return result


def measure(
    args: argparse.Namespace,
    stack: Stack,
    pg: PostgresCluster,
    kind: str,
    url: str,
    redis_pid: int | None,
    tag: str,
    result: CapacityRun,
) -> None:
    warm = [f"warm-{i}" for i in range(2 * args.concurrency)]
    submit_all(stack, warm, args.concurrency, None)
    wait_completed(stack, len(warm), args.stall_timeout, lambda _: None)
    if completed_count(stack) < len(warm):
        raise RuntimeError("the warm-up jobs did not complete; see the logs")

    classes = classes_of(stack, tag)
    roots = {
        **classes,
        "postgres": [pg.pid] if pg.pid else [],
        "broker": broker_roots(kind, redis_pid),
        "vendor": [p.pid for p in stack.procs["vendor"]],
        "domain": [p.pid for p in stack.procs["domain"]],
    }
    counters = PgCounters(pg, stack.database)
    counters.reset()
    table = process_table()
    before = {k: usage(pids, table).cpu_s for k, pids in roots.items()}
    cpu0 = time.process_time()
    start = time.time()

    ids = [f"job-{i}" for i in range(args.jobs)]
    tally = RunResult("capacity", args.jobs)  # submit_all counts the 2xx answers and the others in it
    submitter = threading.Thread(target=submit_all, args=(stack, ids, args.concurrency, tally), daemon=True)
    done = threading.Event()
    progress = {"completed": 0}

    def steady() -> bool:  # from a quarter of the jobs done while submits still run
        return submitter.is_alive() and progress["completed"] >= args.jobs // 4

    sampler = Sampler(classes, pg, stack.database, broker_port(kind, url), steady, done)
    submitter.start()
    sampler.start()

    def seen(count: int) -> None:
        progress["completed"] = count - len(warm)

    wait_completed(stack, args.jobs + len(warm), args.stall_timeout, seen)
    submitter.join()
    done.set()
    sampler.join()
    time.sleep(1.0)
    report: dict[str, Any] = requests.get(stack.domain_url + "/report", timeout=30).json()
    table = process_table()
    after = {k: usage(pids, table).cpu_s for k, pids in roots.items()}
    result.driver_cpu_s = time.process_time() - cpu0
    result.cpu_s = {k: after[k] - before[k] for k in roots}
    result.cpu_s["postgres"] -= sampler.own_cpu_s
    measured = {cid: v for cid, v in report["completed"].items() if not cid.startswith("warm-")}
    result.completed = len(measured)
    result.submitted, result.submit_errors = tally.submitted, tally.submit_errors
    result.window_s = (max(v[0] for v in measured.values()) - start) if measured else 0.0
    result.statements, _, result.commit_statements = counters.statements()
    result.samples = sampler.samples
    stack.stop()
    result.commits, result.sessions = counters.commits_and_sessions()
    counters.close()


# --- printing --------------------------------------------------------------------------------------


def run_table(r: CapacityRun) -> str:
    lines = [
        f"  jobs/s {r.jobs_per_s:.1f} ({r.completed} of {r.submitted} submitted completed in {r.window_s:.1f} s,"
        f" {r.submit_errors} submit(s) refused;"
        f" load average {r.load[0]:.1f} → {r.load[1]:.1f})",
        f"  statements / job {r.per_job(r.statements):.1f}; commits / job {r.per_job(r.commits):.2f} (xact_commit),"
        f" {r.per_job(r.commit_statements):.2f} (COMMIT statements); connections opened / job"
        f" {r.per_job(r.sessions):.3f}",
        f"  {'class':<10}{'CPU s':>8}{'ms/job':>9}{'pg conns':>10}{'broker conns':>14}",
    ]
    for cls in CLASSES:
        lines.append(
            f"  {cls:<10}{r.cpu_s.get(cls, 0):8.2f}{r.ms(cls):9.2f}{r.pg_conns(cls):10.0f}{r.broker_conns(cls):14.0f}"
        )
    for other in OTHERS:
        lines.append(f"  {other:<10}{r.cpu_s.get(other, 0):8.2f}{r.ms(other):9.2f}")
    lines.append(f"  {'driver':<10}{r.driver_cpu_s:8.2f}{r.driver_cpu_s * 1000 / max(r.completed, 1):9.2f}")
    lines.append(
        f"  pg_stat_activity rows of the run's database: at most {r.steady(lambda s: s.activity):.0f},"
        f" busy (active or idle in transaction) {r.mean_busy():.1f} on average ({len(r.samples)} samples)"
    )
    return "\n".join(lines)


def spread(values: list[float], fmt: str = ".1f") -> str:
    """``mean (min–max)`` of a figure over runs."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def summary(kind: str, runs: list[CapacityRun], args: argparse.Namespace) -> str:
    lines = [f"\n==== {kind}: {len(runs)} run(s), mean (min–max)"]
    lines.append(f"  jobs/s end to end (moves with the machine's load):  {spread([r.jobs_per_s for r in runs])}")
    lines.append("  CPU ms per job (moves far less with load):")
    for cls in (*CLASSES, "postgres", "broker"):
        lines.append(f"    {cls:<10}{spread([r.ms(cls) for r in runs], '.2f')}")
    liaison_total = [sum(r.liaison_ms().values()) for r in runs]
    lines.append(f"    {'Liaison (web+worker+calls+relay)':<10} {spread(liaison_total, '.2f')}")
    lines.append(
        f"  statements / job {spread([r.per_job(r.statements) for r in runs])};"
        f" commits / job {spread([r.per_job(r.commits) for r in runs], '.2f')} (xact_commit),"
        f" {spread([r.per_job(r.commit_statements) for r in runs], '.2f')} (COMMIT statements)"
    )
    lines.append(
        f"  PostgreSQL connections per host at steady state {spread([r.pg_conns(*HOST_CLASSES) for r in runs], '.0f')}"
        f" (by class: "
        + ", ".join(f"{c} {spread([r.pg_conns(c) for r in runs], '.0f')}" for c in HOST_CLASSES)
        + f"; beat {spread([r.pg_conns('beat') for r in runs], '.0f')} per deployment)"
    )
    bounds = {c: model.pool_bound(PROCFILE[c], POOL_SIZE) for c in (*HOST_CLASSES, "beat")}
    lines.append(
        f"  the pools' bound (POOL_SIZE {POOL_SIZE} × the Procfile's processes, min(threads, pool) each):"
        f" {sum(bounds[c] for c in HOST_CLASSES)} per host (" + ", ".join(f"{c} {b}" for c, b in bounds.items()) + ")"
    )
    lines.append(
        f"  broker connections per host {spread([r.broker_conns(*HOST_CLASSES) for r in runs], '.0f')} (by class: "
        + ", ".join(f"{c} {spread([r.broker_conns(c) for r in runs], '.0f')}" for c in CLASSES)
        + ")"
    )
    lines.append(f"  busy PostgreSQL connections (transactions in flight) {spread([r.mean_busy() for r in runs])}")
    lines.append(derive(runs, args))
    return "\n".join(lines)


def derive(runs: list[CapacityRun], args: argparse.Namespace) -> str:
    """The model from the runs' means (bench/capacity_model.py's formulae)."""
    mean = statistics.fmean
    u = args.utilisation
    pg_ms = mean(r.ms("postgres") for r in runs)
    commits = mean(r.per_job(r.commits) for r in runs)
    rate = mean(r.jobs_per_s for r in runs)
    liaison = {c: mean(r.ms(c) for r in runs) for c in HOST_CLASSES}
    processes = {c: model.process_shape(PROCFILE[c])[0] for c in HOST_CLASSES}
    measured_pg = mean(r.pg_conns(*HOST_CLASSES) for r in runs)
    # plan with the pools' bound: a pool keeps what it opened, so a burst takes a host up to it
    per_host_pg = sum(model.pool_bound(PROCFILE[c], POOL_SIZE) for c in HOST_CLASSES)
    busy = mean(r.mean_busy() for r in runs)
    seconds_each = model.transaction_seconds(busy, rate, commits)
    within = model.hosts_within_connections(args.max_connections, args.reserved_connections, per_host_pg)
    lines = [
        f"  -- the model (utilisation {u:.0%} of each core; means of the runs above)",
        f"  PostgreSQL: {pg_ms:.2f} CPU ms per job → {model.jobs_per_core_second(pg_ms):.0f} jobs/s per core"
        " fully used;"
        f" a transaction holds its connection {seconds_each * 1000:.1f} ms on average (Little's law, this machine)",
    ]
    broker_ms = mean(r.ms("broker") for r in runs)
    if runs[0].broker == "redis":
        lines.append(
            f"  Redis (one thread): {broker_ms:.2f} CPU ms per job → {model.single_core_ceiling(broker_ms, u):.0f}"
            f" jobs/s at {u:.0%}, {model.single_core_ceiling(broker_ms, 1.0):.0f} fully used, whatever the primary"
        )
    for cores in args.host_cores:
        host, limit = model.host_rate(liaison, processes, cores, u)
        lines.append(
            f"  one Liaison host of {cores} cores, the Procfile as shipped: {host:.0f} jobs/s (limit: {limit})"
        )
    host2, _ = model.host_rate(liaison, processes, args.host_cores[0], u)
    lines.append(
        f"  {'primary cores':>14}{'ceiling jobs/s':>16}{'commits/s':>11}{f'hosts of {args.host_cores[0]} cores':>18}"
        f"{'connections':>13}{'PgBouncer server conns (t above)':>34}"
    )
    for cores in args.primary_cores:
        ceiling = model.primary_ceiling(pg_ms, cores, u)
        hosts = model.hosts_for_rate(ceiling, host2)
        conns = hosts * per_host_pg
        over = " > max" if hosts > within else ""
        lines.append(
            f"  {cores:>14}{ceiling:16.0f}{model.commits_per_s(ceiling, commits):11.0f}{hosts:18d}"
            f"{conns:11.0f}{over:<5}{model.server_connections(ceiling, commits, seconds_each):30.0f}"
        )
    lines.append(
        f"  max_connections {args.max_connections} (−{args.reserved_connections} reserved) admits {within} host(s)"
        f" of {per_host_pg} connections (the pools' bound; {measured_pg:.0f} held at steady state here); past that,"
        " PgBouncer (LIAISON_DATABASE_POOLER=pgbouncer-transaction)"
    )
    if args.target_rate:
        hosts = model.hosts_for_rate(args.target_rate, host2)
        cores_needed = model.primary_cores_for_rate(args.target_rate, pg_ms, u)
        lines.append(
            f"  target {args.target_rate:.0f} jobs/s: {hosts} Liaison host(s) of {args.host_cores[0]} cores,"
            f" a primary of {cores_needed} cores, {model.commits_per_s(args.target_rate, commits):.0f} commits/s"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--broker", choices=["redis", "rabbitmq"], action="append", help="repeatable; default: redis, then rabbitmq"
    )
    parser.add_argument("--jobs", type=int, default=400, help="jobs per run (default 400)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent submitters (default 8)")
    parser.add_argument("--runs", type=int, default=2, help="runs per broker (default 2)")
    parser.add_argument(
        "--stall-timeout", type=float, default=60, help="end a run when no job completes for this long (default 60 s)"
    )
    parser.add_argument(
        "--utilisation",
        type=float,
        default=model.DEFAULT_UTILISATION,
        help=f"share of each core the model plans to use (default {model.DEFAULT_UTILISATION})",
    )
    parser.add_argument(
        "--primary-cores", type=int, action="append", help="PostgreSQL primary sizes (default 2, 4, 8, 16, 32)"
    )
    parser.add_argument("--host-cores", type=int, action="append", help="Liaison host sizes (default 2, 4)")
    parser.add_argument("--max-connections", type=int, default=100, help="PostgreSQL's (default 100)")
    parser.add_argument(
        "--reserved-connections", type=int, default=10, help="kept for operators and migrations (default 10)"
    )
    parser.add_argument("--target-rate", type=float, default=0, help="jobs/s to size for (default: none)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs (always kept on failure)")
    args = parser.parse_args()
    args.broker = args.broker or ["redis", "rabbitmq"]
    args.primary_cores = args.primary_cores or [2, 4, 8, 16, 32]
    args.host_cores = args.host_cores or [2, 4]

    logs = Path(tempfile.mkdtemp(prefix="liaison-capacity-"))
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    say(f"{started} UTC, {os.cpu_count()} CPUs, load average {load_average()}")
    with bench_run(logs, args.keep_logs, say), PostgresCluster(PG_SETTINGS) as pg:
        say(f"PostgreSQL cluster of our own on :{pg.port} (max_connections 200, fsync off), logs in {logs}")
        n = 0
        for kind in args.broker:
            runs = []
            for _ in range(args.runs):
                n += 1
                runs.append(one_run(args, pg, kind, logs, n))
            say(summary(kind, runs, args))


if __name__ == "__main__":
    main()
