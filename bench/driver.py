"""One measured run: submit N jobs from C threads, wait for every ``task.completed`` at the domain
app, and read what it cost (CPU and peak RSS per process kind, SQL statements and commits).

The measured window starts at the first submit and ends when the last job's first
``task.completed`` arrives (or the run times out: what never arrived is lost). A warm-up of a few
jobs runs first, through every process, so start-up is not what is measured; its jobs are left
out of every figure.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import requests

from bench.postgres_cluster import PostgresCluster
from bench.procs import Usage, percentile, pids_named, usage
from bench.stacks import Stack

KINDS = ("web", "worker", "postgres", "broker", "vendor", "domain")


@dataclass
class RunResult:
    label: str
    jobs: int
    submitted: int = 0
    submit_errors: int = 0
    latencies_s: list[float] = field(default_factory=list)
    window_s: float = 0.0
    completed: int = 0
    doubled: int = 0  # correlation ids with two distinct task.completed message ids
    redeliveries: int = 0  # extra deliveries of one message id (at-least-once, not a double)
    failed_state: int = 0
    bad_signatures: int = 0
    vendor_resent: int = 0  # the vendor's webhook re-sends after a non-2xx (naive: job id not stored yet)
    statements: int = 0
    nested_statements: int = 0
    commit_statements: int = 0
    commits: int = 0
    sessions: int = 0  # connections the pipeline opened (pg_stat_database.sessions)
    usage: dict[str, Usage] = field(default_factory=dict)
    driver_cpu_s: float = 0.0
    top_statements: list[tuple[int, float, str]] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.submitted - self.completed

    @property
    def jobs_per_s(self) -> float:
        return self.completed / self.window_s if self.window_s else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies_s, q) * 1000


def broker_roots(broker: str, redis_pid: int | None) -> list[int]:
    if broker == "redis":
        return [redis_pid] if redis_pid else []
    return pids_named("beam.smp")


def roots(stack: Stack, pg: PostgresCluster, broker: str, redis_pid: int | None) -> dict[str, list[int]]:
    found = {kind: [proc.pid for proc in stack.procs.get(kind, [])] for kind in ("web", "worker", "vendor", "domain")}
    found["postgres"] = [pg.pid] if pg.pid else []
    found["broker"] = broker_roots(broker, redis_pid)
    return found


class PgCounters:
    """pg_stat_statements calls and pg_stat_database commits of one database, by difference.
    Read over a connection to the ``postgres`` database, so our own queries are not counted."""

    def __init__(self, pg: PostgresCluster, database: str) -> None:
        self.conn = psycopg.connect(pg.admin_url, autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.database = database

    def reset(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")
        self.commits0, self.sessions0 = self._database_counts()

    def _database_counts(self) -> tuple[int, int]:
        """(xact_commit, sessions) of the database: committed transactions, and connections made."""
        row = self.conn.execute(
            "SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = %s", [self.database]
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def top(self, limit: int) -> list[tuple[int, float, str]]:
        """The ``limit`` statements that took the server longest since reset: (calls, total execution
        ms, query text abridged). Execution time is the server's work for the statement, without
        its parse and protocol round trip, so it tells which statements to make cheaper, not how
        much a round trip saved would."""
        rows = self.conn.execute(
            "SELECT s.calls, s.total_exec_time, CASE WHEN s.toplevel THEN '' ELSE '(nested) ' END || s.query"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " WHERE d.datname = %s ORDER BY s.total_exec_time DESC LIMIT %s",
            [self.database, limit],
        ).fetchall()
        return [(int(calls), float(ms), " ".join(query.split())[:150]) for calls, ms, query in rows]

    def statements(self) -> tuple[int, int, int]:
        """(statements, nested statements, COMMIT statements) since reset. Statements are those the
        clients sent (``toplevel``), BEGIN/COMMIT/ROLLBACK left out; nested ones run inside them
        (foreign-key checks, triggers)."""
        row = self.conn.execute(
            "SELECT coalesce(sum(s.calls) FILTER (WHERE s.toplevel AND upper(btrim(s.query)) NOT IN"
            " ('BEGIN', 'COMMIT', 'ROLLBACK')), 0), coalesce(sum(s.calls) FILTER (WHERE NOT s.toplevel), 0),"
            " coalesce(sum(s.calls) FILTER (WHERE s.toplevel AND upper(btrim(s.query)) = 'COMMIT'), 0)"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
            [self.database],
        ).fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)

    def commits_and_sessions(self) -> tuple[int, int]:
        """Server commits and connections opened since reset, from pg_stat_database: xact_commit is
        every committed transaction, including the empty-statement ping SQLAlchemy's
        ``pool_pre_ping`` sends at a pool checkout (pg_stat_statements does not record it);
        sessions counts every connection made, so a pool that opens and closes connections under
        load shows. Call it once the pipeline has stopped: a backend publishes its counts lazily
        (up to 10 s after going idle), but always on exit."""
        deadline = time.monotonic() + 30
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
        while (row := self.conn.execute(query, [self.database]).fetchone()) and row[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        commits, sessions = self._database_counts()
        return commits - self.commits0, sessions - self.sessions0

    def close(self) -> None:
        self.conn.close()


def submit_all(stack: Stack, ids: list[str], concurrency: int, result: RunResult | None) -> None:
    """POST one task per id from ``concurrency`` threads, each with its own keep-alive session."""
    counter = itertools.count()
    lock = threading.Lock()

    def worker() -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {stack.api_key}"
        while (i := next(counter)) < len(ids):
            cid = ids[i]
            t0 = time.perf_counter()
            try:
                response = session.post(
                    stack.web_url + stack.submit_path,
                    json={"correlation_id": cid, "input": {"n": i}},
                    headers={"Idempotency-Key": cid},
                    timeout=30,
                )
                ok = response.status_code in (200, 201, 202)
            except requests.RequestException:
                ok = False
            took = time.perf_counter() - t0
            if result is not None:
                with lock:
                    result.submitted += ok
                    result.submit_errors += not ok
                    result.latencies_s.append(took)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def completed_count(stack: Stack) -> int:
    return int(requests.get(stack.domain_url + "/progress", timeout=10).json()["completed"])


def wait_completed(stack: Stack, target: int, stall_s: float, progress: Callable[[int], None]) -> None:
    """Until ``target`` correlation ids have a task.completed, or nothing new came for ``stall_s``."""
    last, last_change = -1, time.monotonic()
    while True:
        done = completed_count(stack)
        if done != last:
            last, last_change = done, time.monotonic()
            progress(done)
        if done >= target or time.monotonic() - last_change > stall_s:
            return
        time.sleep(0.2)


def run_jobs(
    stack: Stack,
    pg: PostgresCluster,
    broker: str,
    redis_pid: int | None,
    label: str,
    jobs: int,
    concurrency: int,
    stall_s: float,
    say: Callable[[str], None],
    top_statements: int = 0,
) -> RunResult:
    """Warm up, measure one run of ``jobs`` jobs, and stop ``stack`` (the server's commit count is
    final only once its connections are closed)."""
    warm = [f"warm-{i}" for i in range(2 * concurrency)]
    say(f"  {label}: warm-up ({len(warm)} jobs)")
    submit_all(stack, warm, concurrency, None)
    wait_completed(stack, len(warm), stall_s, lambda n: None)
    if completed_count(stack) < len(warm):
        raise RuntimeError(f"{label}: the warm-up jobs did not complete; see the logs")
    result = RunResult(label, jobs)
    resent_before = requests.get(stack.vendor_url + "/healthz", timeout=10).json()["resent"]
    counters = PgCounters(pg, stack.database)
    counters.reset()
    kinds = roots(stack, pg, broker, redis_pid)
    before = {kind: usage(pids) for kind, pids in kinds.items()}
    cpu0 = time.process_time()
    start = time.time()
    ids = [f"job-{i}" for i in range(jobs)]
    submitter = threading.Thread(target=submit_all, args=(stack, ids, concurrency, result), daemon=True)
    submitter.start()
    say(f"  {label}: submitting {jobs} jobs from {concurrency} threads")

    said = [0.0]  # when progress was last printed: every 2 s at most

    def progress(done: int) -> None:
        if time.monotonic() - said[0] > 2 or done >= jobs + len(warm):
            said[0] = time.monotonic()
            say(f"    submitted {len(result.latencies_s):>6}/{jobs}, completed {done - len(warm):>6}")

    wait_completed(stack, jobs + len(warm), stall_s, progress)
    submitter.join()
    time.sleep(1.0)  # let late duplicates land before the tally is read
    report: dict[str, Any] = requests.get(stack.domain_url + "/report", timeout=30).json()
    after = {kind: usage(pids) for kind, pids in kinds.items()}
    result.driver_cpu_s = time.process_time() - cpu0
    measured = {cid: v for cid, v in report["completed"].items() if not cid.startswith("warm-")}
    result.completed = len(measured)
    result.window_s = (max(v[0] for v in measured.values()) - start) if measured else 0.0
    result.doubled = sum(1 for v in measured.values() if v[1] > 1)
    result.redeliveries = sum(v[2] - v[1] for v in measured.values())
    result.failed_state = sum(1 for v in measured.values() if v[3] != "succeeded")
    result.bad_signatures = report["bad_signatures"]
    vendor = requests.get(stack.vendor_url + "/healthz", timeout=10).json()
    result.vendor_resent = vendor["resent"] - resent_before
    result.statements, result.nested_statements, result.commit_statements = counters.statements()
    result.top_statements = counters.top(top_statements)
    stack.stop()
    result.commits, result.sessions = counters.commits_and_sessions()
    counters.close()
    result.usage = {
        kind: Usage(after[kind].cpu_s - before[kind].cpu_s, after[kind].peak_rss_kb, after[kind].processes)
        for kind in kinds
    }
    return result
