"""A whole Liaison as a deploy runs it, on a broker of the test's own: the Procfile's processes
(web, worker, calls, relay, beat, and the channel readers where asked for) against a PostgreSQL
database of the test's own, the simulator as the vendor and a recording domain app, both in this
process on loopback. The broker is a redis-server or a RabbitMQ node started for the test
(``bench.services``), so restarting it touches nobody else's queues.

Used by tests/integration/test_broker_restart.py: every process must survive the broker going away
and coming back, keeping its pid.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests

from bench.procs import ROOT, Proc, procfile
from bench.stacks import base_env
from tests.integration import services
from tests.integration.procfile_worker import TEST_ONLY
from tests.integration.stack import METRICS_TOKEN, liaison_env, migrate
from tests.support.servers import CallbackRecorder, ServerThread

PROCFILE = procfile((ROOT / "Procfile").read_text())
#: The Celery nodes, by the node name their Procfile line gives them (``-n name@%h``).
CELERY_NODES = ("worker", "calls", "relay")


@dataclass
class Platform:
    """The processes, by Procfile name, and where to reach the web and the domain app."""

    env: dict[str, str]
    web_url: str
    callbacks: CallbackRecorder
    callback_url: str
    log_dir: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    def start(self, name: str) -> Proc:
        command = PROCFILE[name].replace("${WEB_ADDRESS:-0.0.0.0}", "127.0.0.1")
        self.procs[name] = Proc(name, command, self.env, self.log_dir)
        return self.procs[name]

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def exited(self) -> dict[str, str]:
        """name -> exit status and the end of its log, of every process that is no longer running."""
        return {
            name: f"exited with {proc.popen.returncode}:\n{proc.tail(30)}"
            for name, proc in self.procs.items()
            if not proc.alive()
        }

    def ping(self, node: str) -> bool:
        """The Celery node ``node@<host>`` answers a ping over the broker (``app.worker_health``)."""
        import socket

        probe = [
            sys.executable,
            "-m",
            "app.worker_health",
            "--timeout",
            "5",
            "--worker",
            f"{node}@{socket.gethostname()}",
        ]
        return subprocess.run(probe, cwd=ROOT, env=self.env, capture_output=True, check=False).returncode == 0

    def web_up(self) -> bool:
        try:
            return requests.get(f"{self.web_url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


@contextmanager
def platform(broker_url: str, vendor_url: str, vendor_secret: str, tmp: Path) -> Iterator[Platform]:
    """The environment and the in-process parts (database, domain app); the test starts the
    processes it wants with :meth:`Platform.start`, and all are stopped when the block ends."""
    with ExitStack() as stack:
        database_url, name = services.create_postgres_database()
        stack.callback(services.drop_postgres_database, name)
        callbacks = CallbackRecorder()
        callback_server = stack.enter_context(ServerThread(callbacks))
        port = services.free_port()
        env = liaison_env(
            database_url=database_url,
            broker_url=broker_url,
            vendor_url=vendor_url,
            vendor_secret=vendor_secret,
            public_url=f"http://127.0.0.1:{port}",
        )
        env = {k: v for k, v in env.items() if k not in TEST_ONLY}  # the shipped relay timings
        (tmp / "prometheus").mkdir(exist_ok=True)
        env.update(
            LIAISON_VAR_DIR=str(tmp),
            LIAISON_QUEUE=f"liaison-test-{uuid.uuid4().hex[:8]}",
            LIAISON_OUTBOUND_ALLOW=callback_server.url.removeprefix("http://"),
            LIAISON_METRICS_TOKEN=METRICS_TOKEN,
            LIAISON_LOG_LEVEL="info",
            PORT=str(port),
            PROMETHEUS_MULTIPROC_DIR=str(tmp / "prometheus"),
            PYTHONUNBUFFERED="1",
            # the test's pace, not the per-client submit limit, sets the rate
            LIAISON_CLIENT_SUBMIT_RATE_PER_S="1000",
            LIAISON_CLIENT_SUBMIT_BURST="1000",
        )
        migrate(database_url)
        log_dir = tmp / "logs"
        log_dir.mkdir(exist_ok=True)
        built = Platform({**base_env(), **env}, f"http://127.0.0.1:{port}", callbacks, callback_server.url, log_dir)
        try:
            yield built
        finally:
            for proc in reversed(list(built.procs.values())):
                proc.stop(timeout=40)
