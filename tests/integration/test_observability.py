"""Operations on real services: /metrics after a real flow, multiprocess aggregation under a real
gunicorn, JSON logs that tie a request to its Celery task without leaking a secret, /readyz, and
the worker health command."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from celery.utils.nodenames import anon_nodename
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from app.observability.collectors import BusinessCollector
from foundation.logging import configure_logging
from foundation.settings import Settings
from tests.integration import services
from tests.integration.stack import METRICS_AUTH, METRICS_TOKEN, Stack, migrate
from tests.integration.webhook_client import post_event
from webhooks.signing import generate_secret

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(base_url: str) -> Samples:
    """Every sample of ``/metrics``, parsed by prometheus-client's own parser (so the exposition is
    valid text format), keyed by (sample name, labels)."""
    response = requests.get(f"{base_url}/metrics", headers=METRICS_AUTH, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# --- /metrics after a real flow ---------------------------------------------------------------


def test_metrics_count_a_finished_task_and_read_the_broker(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"obs-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}).status_code == 202
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"

    samples = scrape(pair_stack.web.url)
    succeeded = sample(samples, "liaison_tasks", state="succeeded", provider="sim")
    assert succeeded is not None
    assert succeeded >= 1
    assert sample(samples, "liaison_tasks", state="canceled", provider="sim") is not None  # zeros are reported
    for kind in ("submit", "relay", "cancel"):
        assert sample(samples, "liaison_outbox_pending", kind=kind) is not None
        assert sample(samples, "liaison_outbox_oldest_pending_age_seconds", kind=kind) is not None
    assert sample(samples, "liaison_dead_letters_open", kind="submit", fault="system") is not None
    assert sample(samples, "liaison_orphan_events_open") is not None
    assert sample(samples, "liaison_broker_queue_messages", queue=pair_stack.celery.conf.task_default_queue) is not None
    assert sample(samples, "liaison_scrape_source_up", source="database") == 1
    assert sample(samples, "liaison_scrape_source_up", source="broker") == 1


def test_queue_depth_and_oldest_message_age_of_waiting_messages(pair_stack: Stack) -> None:
    """Messages nobody consumes: counted on both brokers; their age read where the broker can tell."""
    queue = f"obs-idle-{uuid.uuid4().hex[:8]}"
    celery = pair_stack.celery
    for _ in range(3):
        celery.send_task("liaison.unconsumed", args=[0], queue=queue)
    collector = BusinessCollector(pair_stack.db, celery, ["sim"], queues=[queue])
    try:
        time.sleep(0.2)
        gauges = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in collector.collect() for s in f.samples}
    finally:
        with celery.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
    assert gauges[("liaison_broker_queue_messages", (("queue", queue),))] == 3
    age = gauges.get(("liaison_broker_queue_oldest_message_age_seconds", (("queue", queue),)))
    if pair_stack.settings.broker_url.startswith("redis"):
        assert age is not None and 0.1 <= age < 30  # from the publish-time header
    else:
        assert age is None  # RabbitMQ cannot tell without consuming


def test_a_webhook_with_a_bad_signature_is_counted(pair_stack: Stack) -> None:
    labels = {"provider": "sim", "reason": "signature"}
    before = sample(scrape(pair_stack.web.url), "liaison_webhooks_rejected_total", **labels) or 0
    response = post_event(pair_stack.web.url, generate_secret(), {"type": "job.accepted", "job_id": "job_x"})
    assert response.status_code == 401
    assert sample(scrape(pair_stack.web.url), "liaison_webhooks_rejected_total", **labels) == before + 1


# --- structured logs --------------------------------------------------------------------------


@pytest.fixture
def json_log(pair_stack: Stack) -> Iterator[io.StringIO]:
    """Everything this process logs (web thread and Celery worker threads alike), as JSON lines."""
    stream = io.StringIO()
    configure_logging("json", "INFO", stream=stream)
    yield stream
    configure_logging(pair_stack.settings.log_format, pair_stack.settings.log_level)


def test_request_and_task_logs_share_the_correlation_id_and_hold_no_secret(
    pair_stack: Stack, vendor_secret: str, json_log: io.StringIO
) -> None:
    api_key, callback_secret, path = pair_stack.new_client()
    cid = f"logs-{uuid.uuid4().hex[:8]}"
    # One transient vendor failure, so the submit task logs its retry (INFO) with its context.
    body = {"correlation_id": cid, "input": {"simulate": {"transient_failures": 1}}}
    assert pair_stack.submit(api_key, body, key=cid).status_code == 202
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)
    assert pair_stack.admin("GET", "/tasks", params={"retrying": "true"}).status_code == 200  # the admin token too

    output = json_log.getvalue()
    lines = [json.loads(line) for line in output.splitlines()]  # every line is one JSON object
    mine = [line for line in lines if line.get("correlation_id") == cid]
    request_lines = [line for line in mine if "request_id" in line and line.get("path", "").endswith(cid)]
    task_lines = [line for line in mine if line.get("task") == "liaison.submit"]
    assert request_lines, "no request line carries the correlation_id"
    assert task_lines, "no liaison.submit line carries the correlation_id"
    assert all(line["task_id"] and line["attempt"] >= 1 and line["outbox_id"] for line in task_lines)
    assert all(line["message_id"].startswith("msg_") for line in task_lines)
    for secret in (api_key, callback_secret, vendor_secret, pair_stack.settings.admin_token):
        assert secret not in output


# --- readiness --------------------------------------------------------------------------------


def _app(tmp_path: Path, *, database_url: str, broker_url: str, **extra: str) -> Flask:
    env = {
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "LIAISON_VAR_DIR": str(tmp_path),
        "LIAISON_LOG_LEVEL": "warning",
        "LIAISON_METRICS_TOKEN": METRICS_TOKEN,
        **extra,
    }
    return create_app(Settings.from_env(env))


def test_readyz_names_what_is_not_ready(pair_stack: Stack, tmp_path: Path) -> None:
    assert pair_stack.internal("/readyz").status_code == 200

    dead_broker = pair_stack.settings.broker_url.split("://")[0] + f"://127.0.0.1:{services.free_port()}/"
    unmigrated = f"sqlite:///{tmp_path / 'empty.db'}"
    cases = [
        (pair_stack.settings.database_url, dead_broker, "broker unreachable"),
        (unmigrated, pair_stack.settings.broker_url, "migrations pending"),
    ]
    for database_url, broker_url, reason in cases:
        app = _app(tmp_path, database_url=database_url, broker_url=broker_url)
        try:
            response = app.test_client().get("/readyz", headers=METRICS_AUTH)
        finally:
            app.extensions["liaison"].db.dispose()
        assert response.status_code == 503
        assert response.mimetype == "application/problem+json"
        assert reason in response.get_json()["detail"]


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_request_that_publishes_while_the_broker_is_down_answers_503(scheme: str, tmp_path: Path) -> None:
    """POST /admin/v1/reconcile publishes straight to the broker: down, it is a 503 that names no host."""
    database_url, token = f"sqlite:///{tmp_path / 'liaison.db'}", "admin-" + uuid.uuid4().hex
    migrate(database_url)
    dead_broker = f"{scheme}://127.0.0.1:{services.free_port()}/"
    app = _app(tmp_path, database_url=database_url, broker_url=dead_broker, LIAISON_ADMIN_TOKEN=token)
    try:
        response = app.test_client().post("/admin/v1/reconcile", headers={"Authorization": f"Bearer {token}"})
    finally:
        app.extensions["liaison"].db.dispose()
    assert response.status_code == 503
    assert response.mimetype == "application/problem+json"
    assert response.headers["Retry-After"] == "5"
    assert response.get_json()["detail"] == "the broker is not answering; try again in a moment"


# --- worker health command ----------------------------------------------------------------------


def _health(stack: Stack, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "PROMETHEUS_"))}
    env.update(CELERY_BROKER_URL=stack.settings.broker_url, LIAISON_VAR_DIR=str(tmp_path), LIAISON_LOG_LEVEL="warning")
    return subprocess.run(
        [sys.executable, "-m", "app.worker_health", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_health_command_exits_0_only_when_the_worker_answers(pair_stack: Stack, tmp_path: Path) -> None:
    worker = anon_nodename()  # the name celery.contrib.testing gives the stack's worker
    alive = _health(pair_stack, tmp_path, "--timeout", "5", "--worker", worker)
    assert alive.returncode == 0, alive.stderr
    assert worker in alive.stdout
    absent = _health(pair_stack, tmp_path, "--timeout", "1", "--worker", "nobody@nowhere")
    assert absent.returncode == 1
    assert "no worker answered" in absent.stderr


# --- multiprocess metrics under a real gunicorn -------------------------------------------------


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """``gunicorn -w 2 -c gunicorn.conf.py 'app:create_app()'`` on a migrated SQLite file and
    Redis, in JSON log mode, with its own multiprocess directory: (url, samples dir, log file)."""
    services.require(services.REDIS_URL, "Redis")
    prom = tmp_path / "prometheus"
    prom.mkdir()
    database_url = f"sqlite:///{tmp_path / 'liaison.db'}"
    migrate(database_url)
    port = services.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "PROMETHEUS_"))}
    env.update(
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=services.REDIS_URL,
        LIAISON_VAR_DIR=str(tmp_path),
        LIAISON_LOG_FORMAT="json",
        LIAISON_LOG_LEVEL="info",
        PROMETHEUS_MULTIPROC_DIR=str(prom),
        LIAISON_METRICS_TOKEN=METRICS_TOKEN,
    )
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "gunicorn.conf.py",
                "-w",
                "2",
                "--bind",
                f"127.0.0.1:{port}",
                "--access-logfile",
                "-",
                "app:create_app()",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or listening while the workers still import the app
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gunicorn did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield url, prom, log_path
    finally:
        proc.send_signal(signal.SIGINT)  # gunicorn's quick shutdown; SIGTERM waits for workers
        proc.wait(timeout=30)


def _counter_pids(prom: Path) -> set[int]:
    return {int(p.stem.split("_")[-1]) for p in prom.glob("counter_*.db")}


def test_two_gunicorn_workers_are_summed_in_one_scrape(gunicorn: tuple[str, Path, Path]) -> None:
    url, prom, log_path = gunicorn
    labels = {"method": "GET", "endpoint": "health.healthz", "status": "200"}
    start = sample(scrape(url), "liaison_http_requests_total", **labels) or 0

    sent = 0
    with ThreadPoolExecutor(8) as pool:
        for _ in range(25):  # until both workers have served (and so written) some
            statuses = list(pool.map(lambda _: requests.get(f"{url}/healthz", timeout=5).status_code, range(16)))
            assert statuses == [200] * 16
            sent += 16
            if len(_counter_pids(prom)) >= 2:
                break
    pids = _counter_pids(prom)
    assert len(pids) >= 2, "the requests never reached the second worker"
    for _ in range(3):  # whichever worker answers the scrape, it reports every worker's count
        assert sample(scrape(url), "liaison_http_requests_total", **labels) == start + sent

    # A worker that dies keeps its counts (gunicorn's child_exit marks it dead; its file stays).
    victim = min(pids)
    os.kill(victim, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _pid_alive(victim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sample(scrape(url), "liaison_http_requests_total", **labels) == start + sent

    lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # gunicorn, access and app lines: all JSON
    assert any(p.get("logger") == "gunicorn.access" and p.get("request_id") for p in parsed)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
