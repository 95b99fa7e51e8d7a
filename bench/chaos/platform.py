"""The platform under test: the Procfile's web, worker, calls, relay, beat and vendor on the suite's own
PostgreSQL cluster and redis-server, configured for a run that must heal itself within minutes."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.chaos.procs import ROOT, Proc, on_loopback, procfile, rss_kib
from bench.postgres_cluster import PostgresCluster
from bench.services import RedisServer, free_port
from webhooks.signing import generate_secret

PROCESSES = ("vendor", "web", "worker", "calls", "relay", "beat")
#: the Celery nodes, each answering a ping once it is up
WORKERS = ("worker", "calls", "relay")

#: What the suite sets beyond the addresses and secrets, and why (docs/runbook.md, "bin/chaos").
# fmt: off
TUNING: tuple[tuple[str, str, str], ...] = (
    ("LIAISON_OUTBOX_LEASE_S", "60",
     "a message the broker lost (Redis restarted empty) is re-published after 60 s, not 30 min"),
    ("LIAISON_OUTBOX_GRACE_S", "5", "rows left unpublished while the broker was down go out at the next sweep"),
    ("LIAISON_PROVIDER_SIM_RECONCILE_AFTER_S", "20", "a dropped webhook is noticed after 20 s quiet, not 15 min"),
    ("LIAISON_PROVIDER_SIM_SUBMIT_MAX_ATTEMPTS", "12", "a submit outlives the vendor's flapping and two 503s"),
    ("LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_BASE_S", "0.5", "first submit retry after 0.5 s, doubling ..."),
    ("LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_CAP_S", "8", "... up to 8 s (Celery countdowns, all below the lease)"),
    ("LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S", "100",
     "the simulator takes 100 calls/s: the provider limit is not what is tested"),
    ("LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST", "20", "..."),
    ("LIAISON_RELAY_SCHEDULE_S", "1,2,4,8,15,30,30,30",
     "a callback that failed (database restarting) is tried again within seconds"),
    ("LIAISON_RELAY_MAX_ATTEMPTS", "9", "one more than the schedule's steps"),
    ("LIAISON_CLIENT_SUBMIT_RATE_PER_S", "1000", "the driver's pace, not the per-client limit, sets the rate"),
    ("LIAISON_CLIENT_SUBMIT_BURST", "200", "..."),
    ("LIAISON_STARTUP_WAIT_S", "30", "a worker restarted during an outage waits for the database and broker"),
    ("LIAISON_LOG_FORMAT", "json", "one JSON line per event in each process's log, for the post-mortem"),
)
# fmt: on


@dataclass
class Platform:
    tmp: Path
    pg: PostgresCluster
    redis: RedisServer
    domain_port: int
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.logs = self.tmp / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.web_port, self.vendor_port = free_port(), free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.vendor_url = f"http://127.0.0.1:{self.vendor_port}"
        self.admin_token = secrets.token_urlsafe(32)
        self.metrics_token = secrets.token_urlsafe(32)
        self.hostname = socket.gethostname()

    def configure(self, database_url: str) -> None:
        vendor_secret = generate_secret()
        (self.tmp / "prometheus").mkdir(exist_ok=True)
        (self.tmp / "var").mkdir(exist_ok=True)  # beat's schedule file (the Procfile's --schedule)
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": self.redis.url,
            "LIAISON_VAR_DIR": str(self.tmp / "var"),
            "PORT": str(self.web_port),
            "LIAISON_PUBLIC_URL": self.web_url,
            "LIAISON_PROVIDERS": "sim",
            "LIAISON_PROVIDER_SIM_BASE_URL": self.vendor_url,
            "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": vendor_secret,
            "SIMULATOR_PORT": str(self.vendor_port),
            "SIMULATOR_WEBHOOK_SECRET": vendor_secret,
            "LIAISON_OUTBOUND_ALLOW": f"127.0.0.1:{self.domain_port}",  # the suite's domain app
            "LIAISON_ADMIN_TOKEN": self.admin_token,
            "LIAISON_METRICS_TOKEN": self.metrics_token,
            "PROMETHEUS_MULTIPROC_DIR": str(self.tmp / "prometheus"),
            **{name: value for name, value, _ in TUNING},
        }
        lines = procfile()
        for name in PROCESSES:
            self.procs[name] = Proc(name, on_loopback(lines[name]), self.env, self.logs)
        self.release = lines["release"]

    def migrate(self) -> None:
        """The Procfile's ``release`` line: migrations, before anything else starts."""
        with (self.logs / "release.log").open("ab") as log:
            subprocess.run(["bash", "-c", self.release], cwd=ROOT, env=self.env, stdout=log, stderr=log, check=True)

    def start(self) -> None:
        for name in PROCESSES:
            self.procs[name].start()
        self.wait_http(f"{self.vendor_url}/healthz")
        self.wait_http(f"{self.web_url}/readyz")
        for name in WORKERS:
            self.wait_worker(name)
        if gone := [name for name, proc in self.procs.items() if not proc.running()]:
            raise RuntimeError(f"{', '.join(gone)} exited at start-up (logs: {self.logs})")

    def supervise(self) -> list[str]:
        """What a process supervisor does (systemd ``Restart=always``, a platform's dyno manager; honcho
        does not): a process that ended without the suite killing it is started again at once.
        Returns a line for each, for the report: an exit of its own is a finding."""
        restarted = []
        for name, proc in self.procs.items():
            with proc.lock:
                code = proc.popen.poll() if proc.popen is not None else None
                if code is None or proc.killed:
                    continue
                old = proc.pid
                proc.kill_group()  # what it left behind (its children), as systemd ends a unit's cgroup
                proc.start()
                restarted.append(f"{name} (pid {old}) exited with {code}, started again as {proc.pid}: logs/{name}.log")
        return restarted

    def wait_http(self, url: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self.metrics_token}"}
        while True:
            try:
                if requests.get(url, headers=headers, timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer 200 within {timeout:g}s (logs: {self.logs})")
            time.sleep(0.5)

    def wait_worker(self, name: str, timeout: float = 90.0) -> float:
        """Until the Celery node ``name@host`` answers a ping over the broker; returns the seconds taken."""
        start = time.monotonic()
        probe = [sys.executable, "-m", "app.worker_health", "--timeout", "5", "--worker", f"{name}@{self.hostname}"]
        while True:
            done = subprocess.run(probe, cwd=ROOT, env=self.env, capture_output=True, check=False)
            if done.returncode == 0:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"{name} did not answer a ping within {timeout:g}s (logs: {self.logs})")
            time.sleep(0.5)

    def create_client(self, callback_url: str) -> tuple[str, str]:
        """A client through the operators' CLI: (API key, callback secret)."""
        name = f"chaos-{secrets.token_hex(3)}"
        argv = ["flask", "--app", "app", "liaison", "clients", "create", name, "--callback-url", callback_url, "--json"]
        done = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, check=True, text=True)
        created = json.loads(done.stdout)
        return created["api_key"], created["callback_secret"]

    # --- the simulator's control API (simulator/control.py) and Liaison's own APIs -------------------
    def vendor_down(self, down: bool) -> None:
        """The simulator's outage switch: every POST /jobs answers 503 while it is on."""
        body = {"down": True, "down_status": 503} if down else {}
        requests.post(f"{self.vendor_url}/_sim/config", json=body, timeout=10).raise_for_status()

    def vendor_jobs(self) -> list[dict[str, Any]]:
        return requests.get(f"{self.vendor_url}/_sim/jobs", timeout=120).json()["jobs"]

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        return requests.request(method, f"{self.web_url}/admin/v1{path}", headers=headers, timeout=30, **kwargs)

    def task_states(self, api_key: str) -> dict[str, str]:
        """correlation id -> state of every task of the client (the public list, 200 a page)."""
        states, cursor = {}, None
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {api_key}"
            while True:
                params = {"limit": "200", **({"cursor": cursor} if cursor else {})}
                page = session.get(f"{self.web_url}/api/v1/tasks", params=params, timeout=30).json()
                states.update({t["correlation_id"]: t["state"] for t in page["tasks"]})
                if not (cursor := page.get("next_cursor")):
                    return states

    def reconcile_now(self) -> None:
        """``POST /admin/v1/reconcile``: the operator's "reconcile now" (beat's schedule has it every
        5 min, and beat intervals are not settings). Failures are ignored: the next nudge comes."""
        with contextlib.suppress(requests.RequestException):
            self.admin("POST", "/reconcile")

    def open_items(self, path: str) -> Counter[str]:
        """Open dead letters or incidents by kind (the admin API, 200 a page)."""
        kinds: Counter[str] = Counter()
        after = None
        while True:
            params = {"state": "open", "limit": "200", **({"after_id": str(after)} if after else {})}
            page = self.admin("GET", path, params=params).json()
            kinds.update(item.get("kind", "?") for item in page["items"])
            if not (after := page.get("next_after_id")):
                return kinds

    def rss(self) -> dict[str, list[int]]:
        """name -> VmRSS (KiB) of each process of its tree, the main process first: the workers, web."""
        return {name: [rss_kib([pid]) for pid in self.procs[name].tree()] for name in (*WORKERS, "web")}

    def stop(self) -> None:
        for name in reversed(PROCESSES):
            if name in self.procs:
                self.procs[name].stop()
