"""The Liaison hosts: each runs the Procfile's web, worker, calls, relay and beat, unchanged, in its own
network namespace and its own UTS namespace (hostname ``lh1`` ..., so the Celery nodes are
``worker@lh1`` ..., as on separate machines), with its own var and metrics folders. One database and
one broker for all (the scenario's). Like ``bin/chaos``'s platform, a process that ends without the run
killing it is started again at once, as a supervisor would, and counted: each one fails the scenario."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import requests

from bench.chaos.procs import ROOT, Proc, procfile
from bench.cluster.net import Network
from bench.cluster.plan import Host, Plan

PROCESSES = ("web", "worker", "calls", "relay", "beat")
WORKERS = ("worker", "calls", "relay")
WEB_PORT = 5000


def on_host(host: Host, line: str) -> str:
    """A Procfile line (or any shell line) run on ``host``: its network namespace, a UTS namespace
    with its hostname."""
    inner = f"hostname {host.name} && exec {line}"
    return f"ip netns exec {host.netns} unshare --uts bash -c {shlex.quote(inner)}"


class LiaisonCluster:
    def __init__(self, plan: Plan, net: Network, env: dict[str, str], base: Path, logs: Path) -> None:
        self.plan, self.net, self.logs = plan, net, logs
        self.env: dict[str, dict[str, str]] = {}
        self.procs: dict[str, dict[str, Proc]] = {}
        self.lost: set[str] = set()  # hosts killed on purpose: nothing of theirs is restarted
        lines = procfile()
        self.release = lines["release"]
        for host in plan.liaison:
            var = base / host.name
            (var / "prometheus").mkdir(parents=True)
            self.env[host.name] = {
                **env,
                "WEB_ADDRESS": host.address,
                "PORT": str(WEB_PORT),
                "LIAISON_VAR_DIR": str(var),
                "PROMETHEUS_MULTIPROC_DIR": str(var / "prometheus"),
            }
            self.procs[host.name] = {
                name: Proc(f"{host.name}-{name}", on_host(host, lines[name]), self.env[host.name], logs)
                for name in PROCESSES
            }

    def run(self, host: Host, argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """A one-off command on ``host`` (the operators' CLI), as the Procfile's processes run there."""
        return subprocess.run(
            ["bash", "-c", on_host(host, shlex.join(argv))],
            cwd=ROOT,
            env=self.env[host.name],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def migrate(self) -> None:
        """The Procfile's ``release`` line, once, on the first host."""
        host = self.plan.liaison[0]
        done = subprocess.run(
            ["bash", "-c", on_host(host, self.release)], cwd=ROOT, env=self.env[host.name], capture_output=True
        )
        (self.logs / "release.log").write_bytes(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"release failed: {(done.stdout + done.stderr).decode()[-2000:]}")

    def start(self) -> None:
        for host in self.plan.liaison:
            for proc in self.procs[host.name].values():
                proc.start()
        for host in self.plan.liaison:
            self.wait_web(host)
            for name in WORKERS:
                self.wait_worker(host, name)

    def wait_web(self, host: Host, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{host.address}:{WEB_PORT}/readyz"
        # off loopback, /readyz wants the metrics token
        headers = {"Authorization": f"Bearer {self.env[host.name]['LIAISON_METRICS_TOKEN']}"}
        while True:
            try:
                if requests.get(url, headers=headers, timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            self._check_started(host)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer 200 within {timeout:g}s (logs: {self.logs})")
            time.sleep(0.5)

    def wait_worker(self, host: Host, name: str, timeout: float = 180.0) -> None:
        """Until the Celery node ``name@<host>`` answers a ping over the broker."""
        deadline = time.monotonic() + timeout
        probe = [sys.executable, "-m", "app.worker_health", "--timeout", "5", "--worker", f"{name}@{host.name}"]
        while self.run(host, probe).returncode != 0:
            self._check_started(host)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}@{host.name} did not answer a ping within {timeout:g}s ({self.logs})")
            time.sleep(0.5)

    def _check_started(self, host: Host) -> None:
        if gone := [p.name for p in self.procs[host.name].values() if not p.running()]:
            raise RuntimeError(f"{', '.join(gone)} exited at start-up (logs: {self.logs})")

    def create_client(self, callback_url: str) -> tuple[str, str]:
        """A client through the operators' CLI on the first host: (API key, callback secret)."""
        argv = ["flask", "--app", "app", "liaison", "clients", "create", "cluster-sim", "--callback-url", callback_url]
        done = self.run(self.plan.liaison[0], [*argv, "--json"])
        if done.returncode != 0:
            raise RuntimeError(f"clients create failed: {done.stderr[-2000:]}")
        created = json.loads(done.stdout)
        return created["api_key"], created["callback_secret"]

    def kill_host(self, host: Host) -> int:
        """SIGKILL every process on the host at once (the machine lost); returns how many there were."""
        self.lost.add(host.name)
        procs = self.procs[host.name].values()
        for proc in procs:
            proc.lock.acquire()
        try:
            for proc in procs:
                proc.killed = True
            killed = self.net.kill_all(host)
            for proc in procs:
                if proc.popen is not None:
                    proc.popen.wait()
        finally:
            for proc in procs:
                proc.lock.release()
        return len(killed)

    def supervise(self) -> list[str]:
        """A process that ended without the run killing it is started again (``Restart=always``);
        returns a line for each, for the report."""
        restarted = []
        for host in self.plan.liaison:
            if host.name in self.lost:
                continue
            for proc in self.procs[host.name].values():
                with proc.lock:
                    code = proc.popen.poll() if proc.popen is not None else None
                    if code is None or proc.killed:
                        continue
                    old = proc.pid
                    proc.kill_group()
                    proc.start()
                    restarted.append(f"{proc.name} (pid {old}) exited with {code}, started again as {proc.pid}")
        return restarted

    def stop(self) -> None:
        for host in self.plan.liaison:
            for name in reversed(PROCESSES):
                self.procs[host.name][name].stop(timeout=10)
