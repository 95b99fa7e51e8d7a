"""Scale out (issue 10): two worker hosts share the load, and each serves its own metrics.

Two real ``celery -A app.make_celery worker --pool prefork --concurrency 1`` processes, each with its
own, initially empty ``PROMETHEUS_MULTIPROC_DIR`` and its own ``LIAISON_WORKER_METRICS_PORT`` (two
hosts, as far as metrics can tell), consume the same work, calls and relay queues on one broker and one
PostgreSQL database. The web runs in this process (its ``/metrics`` is not what is under test). Twenty
tasks go through the API to the simulator; then each host's port is scraped over HTTP: both hosts
did some of the work, together exactly all of it (nothing counted twice, nothing lost), and a scrape
without the metrics token is refused. The counts were made in the prefork children; the port is
served by the worker's main process, and a child forked later (a replacement) does not hold it.

Both brokers (the hosts share only the broker and the database); a second pair of workers costs a
few seconds of boot. The listener's own rules (once per process, a taken port) run in-process below.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from sqlalchemy import func, select

from app import create_app
from app.observability import worker_metrics
from foundation.settings import Settings
from models.messages import OutboxKind, OutboxMessage
from service.credentials import create_client
from tests.integration import services
from tests.integration.processes import Samples, children, parse_samples, poll, poll_while_moving, stop
from tests.integration.stack import METRICS_AUTH, METRICS_TOKEN, delete_queues, liaison_env, migrate
from tests.support.servers import CallbackRecorder, ServerThread

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TASKS = 20
BOOT_TIMEOUT_S = 40  # two workers boot side by side on a busy 2-core machine
#: A wait fails once nothing has moved for this long (the work, not the clock, decides)
STALL_S = 45

SUBMITTED = ("liaison_submissions_total", frozenset({("provider", "sim"), ("outcome", "submitted")}))
DELIVERED = ("liaison_relay_deliveries_total", frozenset({("outcome", "delivered")}))


def _sockets(pid: int) -> set[str]:
    """``socket:[inode]`` of every socket the process holds."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:"):
                held.add(target)
    return held


def _listening_socket(port: int) -> str:
    """``socket:[inode]`` of the IPv4 socket listening on ``port`` (from /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return f"socket:[{fields[9]}]"
    raise AssertionError(f"nothing listens on port {port}")


@dataclass
class Host:
    """One worker host: a ``celery worker`` with a metrics directory and port of its own."""

    name: str
    prom: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str = "/metrics", headers: dict[str, str] | None = None) -> requests.Response:
        # A fresh connection each time: what a scraper does every interval.
        headers = {"Connection": "close", **METRICS_AUTH} if headers is None else headers
        return requests.get(f"http://127.0.0.1:{self.port}{path}", headers=headers, timeout=10)

    def scrape(self) -> Samples:
        response = self.get()
        assert response.status_code == 200, response.text
        return parse_samples(response.text)

    def diagnose(self) -> str:
        try:
            return f"--- {self.name} ---\n{self.log.read_text()[-3000:]}"
        except OSError:
            return f"--- {self.name}: no log ---"


@dataclass
class Platform:
    app: Flask
    web_url: str
    hosts: list[Host]
    callbacks: CallbackRecorder
    callback_url: str

    def diagnose(self) -> str:
        return "\n".join(host.diagnose() for host in self.hosts)


def _start_host(name: str, env: dict[str, str], queues: str, tmp: Path) -> Host:
    prom = tmp / name / "prometheus"
    prom.mkdir(parents=True)  # the host's launcher's job: an empty directory before the worker starts
    port = services.free_port()
    host_env = {
        **env,
        "PROMETHEUS_MULTIPROC_DIR": str(prom),
        "LIAISON_WORKER_METRICS_PORT": str(port),
        "LIAISON_WORKER_METRICS_ADDRESS": "127.0.0.1",
    }
    args = [sys.executable, "-m", "celery", "-A", "app.make_celery", "--quiet", "worker", "--pool", "prefork"]
    args += ["--concurrency", "1", "-n", f"{name}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}", "-Q", queues]
    args += ["--without-mingle", "--without-gossip"]
    log = tmp / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, env=host_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Host(name, prom, port, proc, log)


@pytest.fixture(scope="module", params=["redis", "rabbitmq"])
def platform(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vendor: ServerThread, vendor_secret: str
) -> Iterator[Platform]:
    broker_url = services.BROKERS[request.param]
    services.require(broker_url, request.param)
    tmp = tmp_path_factory.mktemp(f"hosts-{request.param}")
    with ExitStack() as cleanup:
        database_url, db_name = services.create_postgres_database()
        cleanup.callback(services.drop_postgres_database, db_name)
        migrate(database_url)
        callbacks = CallbackRecorder()
        callback_server = cleanup.enter_context(ServerThread(callbacks))
        web_port = services.free_port()
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "PROMETHEUS_"))
        }
        env.update(
            liaison_env(
                database_url=database_url,
                broker_url=broker_url,
                vendor_url=vendor.url,
                vendor_secret=vendor_secret,
                public_url=f"http://127.0.0.1:{web_port}",
            ),
            LIAISON_QUEUE=f"liaison-hosts-{uuid.uuid4().hex[:8]}",
            LIAISON_VAR_DIR=str(tmp),
            LIAISON_OUTBOUND_ALLOW=callback_server.url.removeprefix("http://"),
            LIAISON_CLIENT_SUBMIT_BURST="50",  # all twenty at once
            LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S="200",  # the vendor's limit is not under test
            LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST="50",
        )
        # The web: in this process, with no worker of its own (every task must go to a host).
        settings = Settings.from_env(env)
        app = create_app(settings)
        cleanup.callback(app.extensions["liaison"].db.dispose)
        cleanup.callback(delete_queues, app.extensions["celery"], settings)
        web = cleanup.enter_context(ServerThread(app, port=web_port))

        queues = f"{settings.queue},{settings.calls_queue},{settings.relay_queue}"
        hosts = [_start_host(name, env, queues, tmp) for name in ("host-a", "host-b")]
        for host in hosts:
            cleanup.callback(stop, host.proc)
        built = Platform(app, web.url, hosts, callbacks, f"{callback_server.url}/cb/hosts")

        def ready(host: Host) -> bool:
            """The port opens when the worker is ready (``worker_ready``): the readiness probe too."""
            for each in hosts:
                assert each.proc.poll() is None, f"{each.name} exited with {each.proc.returncode}\n{built.diagnose()}"
            try:
                return host.get().status_code == 200
            except requests.ConnectionError:
                return False

        for host in hosts:
            poll(f"{host.name} to serve its metrics", functools.partial(ready, host), BOOT_TIMEOUT_S, built.diagnose)
        yield built


def _relay_rows(platform: Platform) -> int:
    """The callbacks Liaison wrote for the domain app (every one of them done by now)."""
    with platform.app.extensions["liaison"].db.transaction() as session:
        return session.scalar(select(func.count()).where(OutboxMessage.kind == OutboxKind.RELAY)) or 0


def test_two_hosts_share_the_work_and_each_serves_its_own_counts(platform: Platform) -> None:
    with platform.app.extensions["liaison"].db.transaction() as session:
        _, key, _ = create_client(session, f"hosts-{uuid.uuid4().hex[:8]}", platform.callback_url)
    auth = {"Authorization": f"Bearer {key.api_key}"}
    run = uuid.uuid4().hex[:8]
    ids = [f"hosts-{run}-{i}" for i in range(TASKS)]

    def submit(cid: str) -> requests.Response:
        body: dict[str, Any] = {"correlation_id": cid, "input": {"n": cid}}
        headers = {**auth, "Idempotency-Key": cid}
        return requests.post(f"{platform.web_url}/api/v1/tasks", json=body, headers=headers, timeout=10)

    with ThreadPoolExecutor(5) as pool:
        responses = list(pool.map(submit, ids))
    assert [r.status_code for r in responses] == [202] * TASKS, [r.text for r in responses]

    def states() -> dict[str, str]:
        get = requests.get
        return {
            cid: get(f"{platform.web_url}/api/v1/tasks/{cid}", headers=auth, timeout=10).json()["state"] for cid in ids
        }

    def pending() -> float:
        text = requests.get(f"{platform.web_url}/metrics", headers=METRICS_AUTH, timeout=10).text
        return sum(v for (name, _), v in parse_samples(text).items() if name == "liaison_outbox_pending")

    def moving() -> tuple[object, ...]:
        """What the work has done so far: the tasks' states, the callbacks in, the outbox rows left."""
        return tuple(sorted(states().items())), len(platform.callbacks.requests), pending()

    # Waited for on conditions, as long as the work moves (a busy machine is slow, not stuck):
    # every task final, then the database's word that no work is left (no late callback, no retry).
    poll_while_moving(
        "every task to succeed",
        lambda: set(states().values()) == {"succeeded"},
        moving,
        STALL_S,
        lambda: f"{states()}\n{platform.diagnose()}",
    )
    poll_while_moving("the outbox to drain", lambda: pending() == 0, moving, STALL_S, platform.diagnose)
    # Every relay row written was delivered once, and each task's completion among them. A task
    # hears task.accepted too unless the vendor's job.accepted came in after its job.completed
    # (the simulator sends the completion 0.3 s after starting the job, whether or not the
    # acceptance got through by then): a stale event moves nothing and is relayed to no one.
    callbacks = [json.loads(r.body) for r in platform.callbacks.requests]
    delivered = len(callbacks)
    assert delivered == _relay_rows(platform), callbacks
    kinds = sorted((body["correlation_id"], body["type"]) for body in callbacks)
    assert len(set(kinds)) == delivered, kinds  # none twice
    assert {cid for cid, kind in kinds if kind == "task.completed"} == set(ids), kinds
    assert {kind for _, kind in kinds} <= {"task.accepted", "task.completed"}, kinds

    def per_host() -> list[tuple[float, float]]:
        """(submitted, delivered) as each host's port reports them."""
        return [
            (samples.get(SUBMITTED, 0.0), samples.get(DELIVERED, 0.0)) for samples in map(Host.scrape, platform.hosts)
        ]

    def all_counted() -> list[tuple[float, float]] | None:
        counts = per_host()
        return counts if (sum(s for s, _ in counts), sum(d for _, d in counts)) == (TASKS, delivered) else None

    # A counter is incremented just after its row is marked done: give the last ones a moment to land.
    counts = poll(
        "the hosts' counts to add up to all the work",
        all_counted,
        10,
        lambda: f"(submitted, delivered) per host: {per_host()}\n{platform.diagnose()}",
    )
    # Each host reports only what its own processes did: both did some, neither counted the other's.
    assert all(submitted > 0 and relayed > 0 for submitted, relayed in counts), counts

    for host in platform.hosts:
        for headers in ({}, {"Authorization": "Bearer not-the-metrics-token"}):
            refused = host.get(headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.headers["Content-Type"] == "application/problem+json"
            assert "liaison_" not in refused.text
        assert host.get("/").status_code == 404


def test_the_port_is_the_main_processs_and_a_replacement_child_does_not_hold_it(platform: Platform) -> None:
    host = platform.hosts[0]
    main = host.proc.pid
    listening = _listening_socket(host.port)
    assert listening in _sockets(main)
    (child,) = children(main)  # concurrency 1; forked before the port opened (worker_ready)
    assert listening not in _sockets(child)

    os.kill(child, signal.SIGKILL)  # the pool forks a replacement, after the port opened
    (replacement,) = poll("a replacement child", lambda: children(main) - {child} or None, 20, host.diagnose)
    # worker_process_init runs in the child once it is forked: give it a moment to close its copy.
    poll("the replacement to close its copy of the port", lambda: listening not in _sockets(replacement), 10)
    assert host.scrape().get(SUBMITTED, 0.0) > 0  # the main process still serves, counts intact


def test_a_second_worker_on_a_taken_port_serves_none_and_carries_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Worker and relay of one host, one directory and one port: the first serves both, the second
    logs it and works on. In this process: the listener is once per process, a taken port is no error."""
    monkeypatch.setattr(worker_metrics, "_server", None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"LIAISON_METRICS_TOKEN": METRICS_TOKEN, "LIAISON_WORKER_METRICS_PORT": str(port)}
        with caplog.at_level(logging.WARNING, logger=worker_metrics.__name__):
            assert worker_metrics.start(Settings.from_env(env)) is None
        assert f"cannot listen on 127.0.0.1 port {port}" in caplog.text

    settings = Settings.from_env({**env, "LIAISON_WORKER_METRICS_PORT": str(services.free_port())})
    server = worker_metrics.start(settings)
    assert server is not None
    try:
        assert worker_metrics.start(settings) is server  # once per process
        url = f"http://127.0.0.1:{settings.worker_metrics_port}/metrics"
        assert requests.get(url, headers=METRICS_AUTH, timeout=5).status_code == 200
        assert requests.get(url, timeout=5).status_code == 401
    finally:
        server.shutdown()
        server.server_close()
