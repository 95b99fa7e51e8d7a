"""``/metrics`` is right when the counting is spread over many processes (issue 5).

One real flow on a production-shaped platform, every piece its own OS process:

- ``gunicorn -c gunicorn.conf.py --workers 2 --threads 4 'app:create_app()'`` (as in the Procfile),
- ``celery -A app.make_celery worker --pool prefork --concurrency 2`` (as in the Procfile, on a
  queue of its own),
- both with the same environment and one shared, initially empty ``PROMETHEUS_MULTIPROC_DIR``,
- a fresh, migrated PostgreSQL database, the session's simulator as the vendor (it posts its
  webhooks to gunicorn, the ``LIAISON_PUBLIC_URL``), and a ``CallbackRecorder`` as the domain app.

Four tasks succeed, one is rejected by the vendor (dead-lettered at once), one webhook arrives with
a bad signature. Submissions, provider calls and relay deliveries are counted in the Celery
*prefork children*; webhook rejections in the *gunicorn workers*. Scrapes answered by either
gunicorn worker must report the exact totals, and the per-process sample files show where each
count was made (so a pass cannot come from a single process doing all the work).

Broker: Redis only (db 13, so as not to share a database with the other integration tests'
db 15). Multiprocess aggregation does not depend on the broker, the RabbitMQ paths are covered by
the in-process stacks of the other modules, and a second platform (two more process trees to boot)
would double the run time on a shared 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from celery import Celery
from kombu import Connection, Exchange, Queue
from prometheus_client.multiprocess import MultiProcessCollector

from tests.integration import services
from tests.integration.processes import Samples, children, parse_samples, poll, stop
from tests.integration.stack import METRICS_AUTH, liaison_env, migrate
from tests.integration.webhook_client import post_event
from tests.support.servers import CallbackRecorder, ServerThread
from webhooks.signing import generate_secret

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BROKER_URL = os.environ.get("LIAISON_TEST_MP_REDIS_URL", "redis://127.0.0.1:6379/13")
SUCCEEDING, REJECTED = 4, 1
BOOT_TIMEOUT_S = 40  # gunicorn and the worker boot side by side on a busy 2-core machine
FLOW_TIMEOUT_S = 30


# --- small helpers -----------------------------------------------------------------------------


def scrape(base_url: str) -> Samples:
    """One scrape over a fresh connection (so the kernel may hand it to either gunicorn worker)."""
    response = requests.get(f"{base_url}/metrics", timeout=10, headers={"Connection": "close", **METRICS_AUTH})
    assert response.status_code == 200, response.text
    return parse_samples(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist (a counter never incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def _file_pids(prom: Path) -> set[int]:
    return {int(p.stem.rsplit("_", 1)[1]) for p in prom.glob("*.db")}


def _samples_of(prom: Path, pids: set[int]) -> Samples:
    """What the processes ``pids`` counted, from their own sample files only."""
    files = [str(p) for p in prom.glob("*.db") if int(p.stem.rsplit("_", 1)[1]) in pids]
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for metric in MultiProcessCollector.merge(files, accumulate=True)
        for s in metric.samples
    }


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return f"--- {path.name} ---\n{path.read_text()[-chars:]}"
    except OSError:
        return f"--- {path.name}: unreadable ---"


def _delete_queue(broker_url: str, queue: str) -> None:
    """Delete the work and relay queues and their bindings. Kombu's Redis transport deletes only the
    bindings this channel knows of, so each binding is declared here first (idempotent) and then deleted."""
    with Connection(broker_url, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in (queue, f"{queue}.relay"):
            Queue(name, Exchange(name), routing_key=name).bind(channel).declare()
            channel.queue_delete(name)


# --- the platform ------------------------------------------------------------------------------


@dataclass
class Platform:
    url: str
    env: dict[str, str]
    prom: Path
    gunicorn: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    callbacks: CallbackRecorder
    callback_url: str
    logs: list[Path]

    def diagnose(self) -> str:
        return "\n".join(_tail(log) for log in self.logs)


def _spawn(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("w") as log:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def platform(tmp_path: Path, vendor: ServerThread, vendor_secret: str) -> Iterator[Platform]:
    services.require(BROKER_URL, "Redis")
    with ExitStack() as cleanup:
        database_url, db_name = services.create_postgres_database()
        cleanup.callback(services.drop_postgres_database, db_name)
        migrate(database_url)

        callbacks = CallbackRecorder()
        callback_server = cleanup.enter_context(ServerThread(callbacks))
        prom = tmp_path / "prometheus"
        prom.mkdir()  # the launcher's job: one empty directory for the whole group of processes
        port = services.free_port()
        url = f"http://127.0.0.1:{port}"
        queue = f"liaison-mp-{uuid.uuid4().hex[:8]}"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "PROMETHEUS_"))
        }
        env.update(
            liaison_env(
                database_url=database_url,
                broker_url=BROKER_URL,
                vendor_url=vendor.url,
                vendor_secret=vendor_secret,
                public_url=url,
            )
        )
        env.update(
            LIAISON_QUEUE=queue,
            LIAISON_VAR_DIR=str(tmp_path),
            PROMETHEUS_MULTIPROC_DIR=str(prom),
            LIAISON_OUTBOUND_ALLOW=callback_server.url.removeprefix("http://"),
        )
        cleanup.callback(_delete_queue, BROKER_URL, queue)

        node = f"mp-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
        logs = [tmp_path / "gunicorn.log", tmp_path / "worker.log"]
        gunicorn = _spawn(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "gunicorn.conf.py",
                "--no-control-socket",
                "--workers",
                "2",
                "--threads",
                "4",
                "--bind",
                f"127.0.0.1:{port}",
                "app:create_app()",
            ],
            env,
            logs[0],
        )
        cleanup.callback(stop, gunicorn, signal.SIGINT, 20)  # quick shutdown
        worker = _spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "app.make_celery",
                "--quiet",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "-n",
                node,
                "--without-mingle",
                "--without-gossip",
            ],
            env,
            logs[1],
        )
        cleanup.callback(stop, worker, signal.SIGTERM, 30)  # warm shutdown: children run their shutdown hooks
        built = Platform(url, env, prom, gunicorn, worker, callbacks, f"{callback_server.url}/cb/mp", logs)

        def alive() -> None:
            for name, proc in (("gunicorn", gunicorn), ("celery worker", worker)):
                assert proc.poll() is None, f"{name} exited with {proc.returncode}\n{built.diagnose()}"

        def web_up() -> bool:
            alive()
            try:
                return requests.get(f"{url}/readyz", headers=METRICS_AUTH, timeout=5).status_code == 200
            except (requests.ConnectionError, requests.Timeout):
                return False  # not listening yet, or the workers still import the app

        control = Celery("mp-probe", broker=BROKER_URL, set_as_current=False)
        cleanup.callback(control.close)

        def worker_up() -> bool:
            alive()
            return bool(control.control.ping(destination=[node], timeout=0.5))

        poll("gunicorn to answer /readyz", web_up, BOOT_TIMEOUT_S, diagnose=built.diagnose)
        poll(f"the worker {node} to answer a ping", worker_up, BOOT_TIMEOUT_S, diagnose=built.diagnose)
        poll("two prefork children", lambda: len(children(worker.pid)) == 2, 10, diagnose=built.diagnose)
        yield built


def _create_client(platform: Platform) -> str:
    """The operator's way: ``flask --app app liaison clients create`` with the platform's environment."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flask",
            "--app",
            "app",
            "liaison",
            "clients",
            "create",
            f"mp-{uuid.uuid4().hex[:8]}",
            "--callback-url",
            platform.callback_url,
            "--json",
        ],
        cwd=ROOT,
        env=platform.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])["api_key"]


# --- the test ----------------------------------------------------------------------------------


def test_metrics_after_a_real_flow_are_exact_across_gunicorn_workers_and_prefork_children(
    platform: Platform, vendor: ServerThread
) -> None:
    url = platform.url
    api_key = _create_client(platform)
    auth = {"Authorization": f"Bearer {api_key}"}
    run = uuid.uuid4().hex[:8]
    bodies: list[dict[str, Any]] = [
        {"correlation_id": f"mp-ok-{run}-{i}", "input": {"n": i}} for i in range(SUCCEEDING)
    ]
    bodies += [
        {"correlation_id": f"mp-rejected-{run}-{i}", "input": {"simulate": {"reject": True}}} for i in range(REJECTED)
    ]
    with ThreadPoolExecutor(len(bodies)) as pool:  # concurrently: both web workers and both children get work
        responses = list(
            pool.map(
                lambda body: requests.post(
                    f"{url}/api/v1/tasks",
                    json=body,
                    timeout=10,
                    headers={**auth, "Idempotency-Key": body["correlation_id"]},
                ),
                bodies,
            )
        )
    assert [r.status_code for r in responses] == [202] * len(bodies), [r.text for r in responses]

    bad = post_event(url, generate_secret(), {"type": "job.accepted", "job_id": "job_mp_forged"})
    assert bad.status_code == 401, bad.text

    def states() -> dict[str, str]:
        return {
            b["correlation_id"]: requests.get(
                f"{url}/api/v1/tasks/{b['correlation_id']}", headers=auth, timeout=10
            ).json()["state"]
            for b in bodies
        }

    def all_final() -> dict[str, str] | None:
        now = states()
        return now if all(state in ("succeeded", "failed", "canceled") for state in now.values()) else None

    final = poll(
        "every task to be final",
        all_final,
        FLOW_TIMEOUT_S,
        interval=0.2,
        diagnose=lambda: f"{states()}\n{platform.diagnose()}",
    )
    assert sorted(final.values()) == ["failed"] * REJECTED + ["succeeded"] * SUCCEEDING, final

    # Every state change a client hears of: accepted + completed per succeeding task, and the
    # failure (completed/failed) of the rejected one.
    expected_callbacks = 2 * SUCCEEDING + REJECTED
    platform.callbacks.wait_for(
        lambda reqs: len(reqs) >= expected_callbacks, timeout=FLOW_TIMEOUT_S, message=f"{expected_callbacks} callbacks"
    )

    def drained() -> bool:  # the database's word that no work is left (no late callback, no retry)
        return sum(v for (name, _), v in scrape(url).items() if name == "liaison_outbox_pending") == 0

    poll("the outbox to drain", drained, FLOW_TIMEOUT_S, interval=0.2, diagnose=platform.diagnose)
    received = platform.callbacks.requests
    assert len(received) == expected_callbacks, [(r.path, r.body[:120]) for r in received]
    assert all(r.status == 204 and r.path == "/cb/mp" for r in received)
    by_task: dict[str, list[str]] = {}
    for r in received:
        payload = r.json()
        by_task.setdefault(payload["correlation_id"], []).append(payload["type"])
    assert sorted(by_task) == sorted(b["correlation_id"] for b in bodies), by_task
    delivered = len(received)

    def vendor_posts() -> int:
        """What the vendor sent our web (each attempt is one POST /webhooks/sim)."""
        sim = requests.get(f"{vendor.url}/_sim/jobs", timeout=10).json()
        ours = {j["job_id"] for j in sim["jobs"] if j["callback_url"].startswith(url)}
        return sum(1 for d in sim["deliveries"] if d["job_id"] in ours and d["result"] != "dropped")

    submit_202 = (("method", "POST"), ("endpoint", "tasks.submit"), ("status", "202"))
    expected = {
        ("liaison_submissions_total", (("provider", "sim"), ("outcome", "submitted"))): SUCCEEDING,
        ("liaison_submissions_total", (("provider", "sim"), ("outcome", "dead_lettered"))): REJECTED,
        ("liaison_submissions_total", (("provider", "sim"), ("outcome", "retried"))): 0,
        ("liaison_provider_calls_total", (("provider", "sim"), ("operation", "submit"), ("outcome", "ok"))): SUCCEEDING,
        (
            "liaison_provider_calls_total",
            (("provider", "sim"), ("operation", "submit"), ("outcome", "permanent_error")),
        ): REJECTED,
        ("liaison_provider_call_duration_seconds_count", (("provider", "sim"), ("operation", "submit"))): SUCCEEDING
        + REJECTED,
        ("liaison_relay_deliveries_total", (("outcome", "delivered"),)): delivered,
        ("liaison_relay_deliveries_total", (("outcome", "retried"),)): 0,
        ("liaison_relay_delivery_latency_seconds_count", ()): delivered,
        ("liaison_webhooks_rejected_total", (("provider", "sim"), ("reason", "signature"))): 1,
        ("liaison_webhooks_received_total", (("provider", "sim"),)): vendor_posts() + 1,  # + the forged one
        ("liaison_http_requests_total", submit_202): len(bodies),
        ("liaison_tasks", (("state", "succeeded"), ("provider", "sim"))): SUCCEEDING,
        ("liaison_tasks", (("state", "failed"), ("provider", "sim"))): REJECTED,
    }

    def wrong(samples: Samples) -> dict[str, tuple[float, float]]:
        """{series: (scraped, expected)} for every series that is off."""
        return {
            f"{name}{dict(labels)}": (value(samples, name, **dict(labels)), want)
            for (name, labels), want in expected.items()
            if value(samples, name, **dict(labels)) != want
        }

    # A counter is incremented just after its row is marked done: give the last increments a moment
    # to land (bounded), then every scrape must be exact.
    poll(
        "every counter to reach its exact total",
        lambda: not wrong(scrape(url)),
        10,
        interval=0.2,
        diagnose=lambda: f"off (scraped, expected): {wrong(scrape(url))}\n{platform.diagnose()}",
    )

    # Scrape in concurrent rounds until each gunicorn worker has answered some of them (every scrape
    # counts itself in the answering worker's own file): every answer must be exact.
    web_pids = children(platform.gunicorn.pid)
    assert len(web_pids) == 2, web_pids
    metrics_endpoint = (
        "liaison_http_requests_total",
        frozenset({("method", "GET"), ("endpoint", "health.prometheus_metrics"), ("status", "200")}),
    )
    answered_by: set[int] = set()
    scrapes = 0
    with ThreadPoolExecutor(4) as pool:
        for _ in range(10):
            for samples in pool.map(lambda _: scrape(url), range(4)):
                scrapes += 1
                assert not wrong(samples), f"scrape {scrapes}: {wrong(samples)}"
            answered_by = {pid for pid in web_pids if _samples_of(platform.prom, {pid}).get(metrics_endpoint, 0) > 0}
            if answered_by == web_pids:
                break
    assert answered_by == web_pids, f"only {answered_by} of the gunicorn workers {web_pids} answered {scrapes} scrapes"

    # Where the counts were made: the sample files of each process, read one process at a time.
    worker_pid, prefork = platform.worker.pid, children(platform.worker.pid)
    assert len(prefork) == 2, prefork
    pids = _file_pids(platform.prom)
    assert len(pids) > 1 and web_pids <= pids and prefork & pids, (pids, web_pids, prefork)
    in_children, in_web = _samples_of(platform.prom, prefork), _samples_of(platform.prom, web_pids)
    in_worker_main = _samples_of(platform.prom, {worker_pid})
    submitted = ("liaison_submissions_total", frozenset({("provider", "sim"), ("outcome", "submitted")}))
    relayed = ("liaison_relay_deliveries_total", frozenset({("outcome", "delivered")}))
    rejected = ("liaison_webhooks_rejected_total", frozenset({("provider", "sim"), ("reason", "signature")}))
    assert in_children.get(submitted, 0) == SUCCEEDING and in_children.get(relayed, 0) == delivered, in_children
    assert in_web.get(submitted, 0) == 0 and in_worker_main.get(submitted, 0) == 0
    assert in_web.get(rejected, 0) == 1 and in_children.get(rejected, 0) == 0
