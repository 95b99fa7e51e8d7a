"""Two clients on one stack for bench/fairness.py: Liaison started from the Procfile with clients A
and B and their lean domain app (``two_clients``), the driver's view of them (``Bench``: submit, wait,
read what the vendor and the domain app received) and a task's latencies (``Timing``). Apart from
the cases because every case runs on such a stack and measures through it."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.postgres_cluster import PostgresCluster
from bench.procs import Proc
from bench.services import free_port, wait_for_port
from bench.stacks import Stack, base_env, start_liaison
from models.db import Database
from service.credentials import create_client

IDLE_SAMPLES = 3
WARM_UP = 2  # tasks per client before anything is measured
CLIENTS = ("a", "b")


def say(line: str) -> None:
    print(line, flush=True)


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
    samples = [timings(bench, {cid: bench.submit(client, cid)})[cid] for cid in ids(f"{client}-idle", IDLE_SAMPLES)]
    problems = [s.problem for s in samples if s.problem]
    vendor, completed = _median([s.vendor_s for s in samples]), _median([s.completed_s for s in samples])
    return Timing(vendor, completed, problems[0] if problems else None)


def _median(values: list[float | None]) -> float | None:
    """The median, or None when one of them is missing."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


def ids(prefix: str, n: int) -> list[str]:
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
        warm = {cid: bench.submit(c, cid) for c in CLIENTS for cid in ids(f"{c}-warm", WARM_UP)}
        if problems := [t.problem for t in timings(bench, warm, 120).values() if t.problem]:
            raise RuntimeError(f"the warm-up tasks did not complete ({problems[0]}); see the logs")
        yield bench
    finally:
        stack.stop()
