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
import contextlib
import os
import select
import shutil
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from bench import report
from bench.environment import broker
from bench.postgres_cluster import PostgresCluster
from bench.procs import ROOT, Proc
from bench.services import free_port, wait_for_port
from bench.stacks import PROVIDER, UNLIMITED, Stack, base_env, start_liaison
from foundation.setting_table import SECTIONS
from models.db import Database
from service.credentials import create_client

IDLE_SAMPLES = 3
WARM_UP = 2  # tasks per client before anything is measured
IN_FLIGHT_ENV = f"LIAISON_PROVIDER_{PROVIDER.upper()}_MAX_IN_FLIGHT"
IN_FLIGHT = 20
IN_FLIGHT_TASKS = 200
SLOW_COMPLETE_S = 2.0
HOLD_ANSWER_S = 1.0
TARPIT_TASKS = 6
TRICKLE_S = 2.0
CLIENTS = ("a", "b")


def say(line: str) -> None:
    print(line, flush=True)


# --- the tarpit ------------------------------------------------------------------------------


class Tarpit(socketserver.ThreadingTCPServer):
    """A callback endpoint that never answers: it reads the request head, sends a status line, then
    one header line every ``interval_s`` and never the blank line that ends the head, until the
    caller hangs up. Counts the connections it accepted and the most it held at once."""

    daemon_threads = True

    def __init__(self, interval_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Trickle)
        self.interval_s = interval_s
        self.port = int(self.socket.getsockname()[1])
        self.lock = threading.Lock()
        self.accepted = self.held = self.most_held = 0
        self.closing = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def holding(self, change: int) -> None:
        with self.lock:
            self.accepted += change > 0
            self.held += change
            self.most_held = max(self.most_held, self.held)

    def close(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


class _Trickle(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        tarpit, conn = self.server, self.request
        assert isinstance(tarpit, Tarpit) and isinstance(conn, socket.socket)
        tarpit.holding(+1)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            line = 0
            while not tarpit.closing.is_set():
                if select.select([conn], [], [], tarpit.interval_s)[0]:
                    if not conn.recv(65536):
                        return  # the caller hung up
                    continue  # the rest of the request body: read and ignored
                conn.sendall(f"X-Drip-{line}: x\r\n".encode())
                line += 1
        except OSError:
            pass  # reset by the caller
        finally:
            tarpit.holding(-1)


# --- two clients on one stack ----------------------------------------------------------------


@dataclass
class Bench:
    """A running stack with clients A and B (API keys by name) and their domain app."""

    stack: Stack
    domain_url: str
    keys: dict[str, str]
    stall_s: float | None
    timeout_s: float
    expected: int = 0  # tasks answered 202 whose task.completed is awaited
    http: requests.Session = field(default_factory=requests.Session)

    def post(self, session: requests.Session, client: str, cid: str, extra: dict[str, Any]) -> requests.Response:
        return session.post(
            self.stack.web_url + self.stack.submit_path,
            json={"correlation_id": cid, "input": {"cid": cid}, **extra},
            headers={"Authorization": f"Bearer {self.keys[client]}", "Idempotency-Key": cid},
            timeout=30,
        )

    def submit(self, client: str, cid: str, extra: dict[str, Any] | None = None, awaited: bool = True) -> float:
        """One task; the time its 202 arrived. Any other answer is an error."""
        response = self.post(self.http, client, cid, extra or {})
        at = time.time()
        if response.status_code != 202:
            raise RuntimeError(f"submitting {cid} answered {response.status_code}: {response.text[:300]}")
        self.expected += awaited
        return at

    def submit_many(self, client: str, cids: list[str], extra: dict[str, Any], concurrency: int) -> tuple[float, int]:
        """Every id from ``concurrency`` threads, a keep-alive session each: (seconds taken, not 202)."""
        local = threading.local()

        def one(cid: str) -> bool:
            if not hasattr(local, "session"):
                local.session = requests.Session()
            try:
                return self.post(local.session, client, cid, extra).status_code == 202
            except requests.RequestException:
                return False

        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            accepted = sum(pool.map(one, cids))
        self.expected += accepted
        return time.monotonic() - started, len(cids) - accepted

    def completed(self) -> int:
        return int(self.http.get(self.domain_url + "/progress", timeout=10).json()["completed"])

    def completed_at(self, cid: str) -> float | None:
        response = self.http.get(f"{self.domain_url}/completed/{cid}", timeout=10)
        return float(response.json()["at"]) if response.status_code == 200 else None

    def received(self) -> dict[str, float]:
        """Correlation id → when the vendor received its job."""
        jobs = self.http.get(self.stack.vendor_url + "/received", timeout=60).json()["jobs"]
        return {str(job["cid"]): float(at) for at, job in jobs if isinstance(job, dict) and "cid" in job}

    def vendor(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.stack.vendor_url + path
        response = self.http.get(url, timeout=10) if body is None else self.http.post(url, json=body, timeout=10)
        found: dict[str, Any] = response.json()
        return found

    def wait(self, done: Callable[[], bool], what: str, timeout_s: float | None = None) -> str | None:
        """Poll ``done`` until true (None) or a limit is reached: what timed out. Says how many tasks
        have completed every 10 s."""
        timeout_s = timeout_s or self.timeout_s
        start = last_said = changed = time.monotonic()
        count = -1
        while not done():
            now = time.monotonic()
            if now - start > timeout_s:
                return f"{what}: timed out after {timeout_s:.0f} s"
            if self.stall_s is not None or now - last_said > 10:
                if (latest := self.completed()) != count:
                    count, changed = latest, now
                if self.stall_s is not None and now - changed > self.stall_s:
                    return f"{what}: nothing completed for {self.stall_s:.0f} s ({count} of {self.expected} done)"
            if now - last_said > 10:
                last_said = now
                say(f"    {what}: {count} of {self.expected} tasks completed ({now - start:.0f} s)")
            time.sleep(0.1)
        return None

    def drain(self) -> str | None:
        return self.wait(lambda: self.completed() >= self.expected, "every task's task.completed")


@dataclass
class Timing:
    """One task's latencies from its 202 (s; None: did not arrive), and what timed out."""

    vendor_s: float | None
    completed_s: float | None
    problem: str | None = None


def timings(bench: Bench, sent: dict[str, float], timeout_s: float | None = None) -> dict[str, Timing]:
    """Wait for the task.completed of each id of ``sent`` (id → its 202 time); then read when the
    vendor received each job."""
    arrived: dict[str, float] = {}

    def all_in() -> bool:
        for cid in sent.keys() - arrived.keys():
            if (at := bench.completed_at(cid)) is not None:
                arrived[cid] = at
        return len(arrived) == len(sent)

    problem = bench.wait(all_in, "task.completed of " + ", ".join(sent), timeout_s)
    received = bench.received()
    return {
        cid: Timing(
            received[cid] - at if cid in received else None,
            arrived[cid] - at if cid in arrived else None,
            None if cid in arrived else problem,
        )
        for cid, at in sent.items()
    }


def idle(bench: Bench, client: str) -> Timing:
    """The median of IDLE_SAMPLES tasks, one after another, on an idle stack."""
    samples = [timings(bench, {cid: bench.submit(client, cid)})[cid] for cid in _ids(f"{client}-idle", IDLE_SAMPLES)]
    problems = [s.problem for s in samples if s.problem]
    vendor, completed = _median([s.vendor_s for s in samples]), _median([s.completed_s for s in samples])
    return Timing(vendor, completed, problems[0] if problems else None)


def _median(values: list[float | None]) -> float | None:
    """The median, or None when one of them is missing."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


@dataclass
class Run:
    """What every case starts its stack with."""

    pg: PostgresCluster
    broker_url: str
    logs: Path
    tag: str
    args: argparse.Namespace


@contextlib.contextmanager
def two_clients(run: Run, extra_env: dict[str, str] | None = None, allow: tuple[int, ...] = ()) -> Iterator[Bench]:
    """Liaison with clients A and B, whose callbacks go to one lean domain app on a port of ours
    (LIAISON_OUTBOUND_ALLOW lists it and the ports of ``allow``), warmed up."""
    domain_port = free_port()
    origins = ",".join(f"127.0.0.1:{port}" for port in (domain_port, *allow))
    env = {"LIAISON_OUTBOUND_ALLOW": origins, **(extra_env or {})}
    stack = start_liaison(run.pg, run.broker_url, run.logs, tag=run.tag, extra_env=env)
    try:
        db = Database(run.pg.database_url(stack.database))
        with db.transaction() as session:
            made = {c: create_client(session, f"client-{c}", f"http://127.0.0.1:{domain_port}/{c}") for c in CLIENTS}
        db.dispose()
        secrets = " ".join(f"--secret {secret}" for _, _, secret in made.values())
        command = f"{sys.executable} -m bench.lean_domain --port {domain_port} {secrets}"
        domain = Proc(f"{run.tag}-domain-ab", command, base_env(), run.logs)
        stack.procs.setdefault("domain", []).append(domain)
        wait_for_port(domain_port, 30, domain.popen)
        keys = {c: key.api_key for c, (_, key, _) in made.items()}
        bench = Bench(stack, f"http://127.0.0.1:{domain_port}", keys, run.args.stall_timeout, run.args.timeout)
        warm = {cid: bench.submit(c, cid) for c in CLIENTS for cid in _ids(f"{c}-warm", WARM_UP)}
        if problems := [t.problem for t in timings(bench, warm, 120).values() if t.problem]:
            raise RuntimeError(f"the warm-up tasks did not complete ({problems[0]}); see the logs")
        yield bench
    finally:
        stack.stop()


def build_default(env: str) -> str:
    """A setting's default in the build this runs from (its foundation/setting_table.py)."""
    return next(option.default for section in SECTIONS for option in section.options if option.env == env)


# --- the cases -------------------------------------------------------------------------------


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
    cids = _ids(f"{backlog.client}-before-{backlog.cid}", backlog.size)
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
        took, refused = bench.submit_many("a", _ids("a-open", IN_FLIGHT_TASKS), {}, args.concurrency)
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
            for cid in _ids("a-tarpit", TARPIT_TASKS):
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


# --- the table -------------------------------------------------------------------------------


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
