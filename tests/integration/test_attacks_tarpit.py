"""Tarpits: one tenant's trickling callback endpoint holds a few sockets of the relay process,
never the capacity another tenant, or the same tenant's other endpoints, need; and relays run on
their own queue, apart from submissions.

The endpoint case runs what a deploy runs: the Procfile's relay line (a threads pool of
``LIAISON_RELAY_THREADS``) with the shipped relay settings (caps, the 15 s call deadline, the retry
schedule). Tenant A's endpoint is a loopback tarpit (a status line, then one header every 2 s,
never done).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from flask import Flask
from kombu import Queue
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import create_app
from app.celery_app import work_queues
from foundation.settings import Settings
from models import OutboxMessage
from models.base import utcnow
from models.messages import OutboxKind
from models.task import ExternalTask
from service.outbox_rows import add_outbox
from tests.integration.conftest import PAIRS, _stack
from tests.integration.procfile_worker import procfile_worker
from tests.integration.stack import Stack, delete_queues, liaison_env
from tests.support.listeners import Tarpit
from tests.support.servers import ServerThread

SHIPPED = Settings.from_env({})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def tarpit_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # The tarpit listens on a loopback port of its own: the outbound guard must let it through here
    # (tests/integration/test_attacks_ssrf.py shows what it refuses). No relay worker of the stack's:
    # a test runs the Procfile's.
    extra = {"LIAISON_OUTBOUND_ALLOW": "127.0.0.1"}
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra, relay_in_process=False)


@pytest.fixture
def tarpit() -> Iterator[Tarpit]:
    with Tarpit(interval_s=2.0) as pit:
        yield pit  # closing it lets the held connections go, so the worker can shut down


def _wait(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.2)


def _relays(stack: Stack, correlation_ids: list[str]) -> list[OutboxMessage]:
    with stack.db.transaction() as session:
        return list(
            session.scalars(
                select(OutboxMessage).where(
                    OutboxMessage.kind == OutboxKind.RELAY, OutboxMessage.correlation_id.in_(correlation_ids)
                )
            )
        )


def _completed(stack: Stack, path: str, correlation_id: str) -> Callable[[], bool]:
    return lambda: any(
        r.path == path and r.json()["type"] == "task.completed" and r.json()["correlation_id"] == correlation_id
        for r in stack.callbacks.requests
    )


@pytest.mark.timeout(300)
def test_a_trickling_endpoint_delays_neither_another_tenant_nor_its_own_tenants_other_endpoints(
    tarpit_stack: Stack, tarpit: Tarpit, tmp_path: Path
) -> None:
    stack = tarpit_stack
    key_a, _, path_a = stack.new_client()
    key_b, _, path_b = stack.new_client()
    tag = uuid.uuid4().hex[:8]
    slow = [f"trickle-a-{tag}-{i}" for i in range(6)]
    with procfile_worker(stack, "relay", tmp_path) as relay:
        for cid in slow:
            body = {"correlation_id": cid, "input": "slow endpoint", "callback_url": f"{tarpit.url}/a"}
            assert stack.submit(key_a, body).status_code == 202
        # A's relays to the tarpit take the endpoint's whole share and wait there.
        _wait(lambda: tarpit.open >= SHIPPED.relay_endpoint_concurrency, "A's relays filled the tarpit's share")
        assert relay.alive(), relay.tail()

        # Then a task of A's whose callback goes to A's healthy endpoint, and one of B's.
        a_fast, b_task = f"fast-a-{tag}", f"fast-b-{tag}"
        assert stack.submit(key_a, {"correlation_id": a_fast, "input": "fast endpoint"}).status_code == 202
        assert stack.submit(key_b, {"correlation_id": b_task, "input": "fast endpoint"}).status_code == 202
        _wait(_completed(stack, path_a, a_fast), "A's other endpoint got its callbacks", timeout=60)
        _wait(_completed(stack, path_b, b_task), "B got its callbacks", timeout=60)

        # ...while the tarpit still held A's slow deliveries, never more than the endpoint's share.
        assert tarpit.open >= 1
        assert tarpit.max_open <= SHIPPED.relay_endpoint_concurrency
        assert all(r.done_at is None for r in _relays(stack, slow))
        for path, cid in ((path_a, a_fast), (path_b, b_task)):
            types = [
                r.json()["type"]
                for r in stack.callbacks.requests
                if r.path == path and r.json()["correlation_id"] == cid
            ]
            assert types == ["task.accepted", "task.completed"], (cid, types)

        # The tarpit's deliveries time out (the 15 s call deadline) and fail in a row: the endpoint
        # is paused for A alone, and the admin API shows it.
        origin = tarpit.url
        _wait(lambda: _endpoint_state(stack, origin) == "paused", "the tarpit endpoint was paused", timeout=120)
        assert relay.alive(), relay.tail()


def _endpoint_state(stack: Stack, origin: str) -> str | None:
    items = stack.admin("GET", "/callback-endpoints/health").json()["items"]
    return next((item["state"] for item in items if item["origin"] == origin), None)


@contextmanager
def _worker(env: dict[str, str], queue: str, pool: str = "threads") -> Iterator[subprocess.Popen[str]]:
    """A worker process consuming one queue only (an in-process test worker cannot run beside the
    stack's: stopping one stops every worker of the process)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "app.make_celery",
            "worker",
            "--pool",
            pool,
            "--concurrency",
            "1",
            "-Q",
            queue,
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"iso-{uuid.uuid4().hex[:6]}@%h",
        ],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def _side_app(stack: Stack, vendor_secret: str, tmp_path: Path, **extra: str) -> Iterator[tuple[Flask, dict[str, str]]]:
    """A Liaison on the stack's database and broker but its own queues, with no worker of its own."""
    env = liaison_env(
        database_url=stack.settings.database_url,
        broker_url=stack.settings.broker_url,
        vendor_url=stack.vendor_url,
        vendor_secret=vendor_secret,
        public_url=stack.settings.public_url,
    )
    env.update(
        LIAISON_VAR_DIR=str(tmp_path),
        LIAISON_QUEUE=f"{stack.queue}-{uuid.uuid4().hex[:6]}",
        LIAISON_OUTBOUND_ALLOW="127.0.0.1",
    )
    env.update(extra)
    app = create_app(Settings.from_env(env))
    try:
        yield app, env
    finally:
        delete_queues(app.extensions["celery"], app.extensions["liaison"].settings)
        app.extensions["liaison"].db.dispose()


def _relay_row(stack: Stack, correlation_id: str) -> OutboxMessage:
    """A relay row for the task, as a state change writes it (not yet published: a plain session on
    the engine, not one of the app's sessionmaker, whose publish hook would publish it at commit)."""
    with Session(stack.db.engine, expire_on_commit=False) as session, session.begin():
        task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == correlation_id)).one()
        return add_outbox(
            session,
            OutboxKind.RELAY,
            task,
            utcnow(),
            type="task.accepted",
            correlation_id=correlation_id,
            state="accepted",
            outcome=None,
            occurred_at=utcnow().isoformat(),
        )


def _row(stack: Stack, outbox_id: int) -> OutboxMessage:
    with stack.db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        return row


@pytest.mark.timeout(240)
def test_relays_run_on_their_own_queue(tarpit_stack: Stack, vendor_secret: str, tmp_path: Path) -> None:
    """A relay row is published to the relay queue and a submission to the calls queue, neither to
    the work queue: a worker on the calls queue alone runs the submission published after the relay
    but never the relay; a relay-queue worker then delivers it."""
    stack = tarpit_stack
    with _side_app(stack, vendor_secret, tmp_path) as (app, env):
        settings, celery = app.extensions["liaison"].settings, app.extensions["celery"]
        api_key, _, path = stack.new_client()
        cid, submit_id = stack.unpublished_task(api_key, {"input": "routed"})
        relay = _relay_row(stack, cid)
        publisher = app.extensions["liaison"].publisher
        assert publisher.publish([relay]) == 1 and publisher.publish([_row(stack, submit_id)]) == 1

        def depth(queue: Queue) -> int:
            with celery.connection_for_write() as conn:
                # declared, not passive: nothing was published to the work queue, so it may not exist yet
                return queue(conn.default_channel).queue_declare().message_count

        work, relay_queue, calls = work_queues(settings)
        assert (depth(work), depth(relay_queue), depth(calls)) == (0, 1, 1)

        with _worker(env, calls.name):
            _wait(lambda: _row(stack, submit_id).done_at is not None, "the submission ran", timeout=90)
        assert _row(stack, relay.id).done_at is None and depth(relay_queue) >= 1  # published first, still waiting

        with _worker(env, relay_queue.name) as proc:
            try:
                _wait(
                    lambda: _row(stack, relay.id).done_at is not None, "the relay-queue worker delivered it", timeout=90
                )
            except AssertionError:
                proc.terminate()
                raise AssertionError(f"worker output:\n{proc.communicate(timeout=30)[0][-2000:]}") from None
        assert any(r.path == path and r.headers.get("webhook-id") == relay.message_id for r in stack.callbacks.requests)


@pytest.mark.timeout(240)
def test_a_relay_past_its_soft_time_limit_is_a_failed_attempt(
    tarpit_stack: Stack,
    vendor_secret: str,
    tmp_path: Path,
    tarpit: Tarpit,
) -> None:
    """In the prefork pool Celery's soft limit fires inside the call to the tarpit: the attempt is
    recorded as failed and retried per policy (not lost until the sweep's lease runs out)."""
    stack = tarpit_stack
    # The call's own deadline (LIAISON_RELAY_TIMEOUT_S) is set past the soft limit, so the soft
    # limit is what ends this attempt.
    limits = {
        "LIAISON_TASK_SOFT_TIME_LIMIT_S": "3",
        "LIAISON_TASK_TIME_LIMIT_S": "20",
        "LIAISON_RELAY_SCHEDULE_S": "30",
        "LIAISON_RELAY_MAX_ATTEMPTS": "3",
        "LIAISON_RELAY_TIMEOUT_S": "15",
        "LIAISON_OUTBOUND_ALLOW": "127.0.0.1",
    }
    with _side_app(stack, vendor_secret, tmp_path, **limits) as (app, env):
        api_key, _, _ = stack.new_client()
        cid, _ = stack.unpublished_task(api_key, {"input": "slow endpoint", "callback_url": f"{tarpit.url}/a"})
        relay = _relay_row(stack, cid)
        assert app.extensions["liaison"].publisher.publish([relay]) == 1
        with _worker(env, app.extensions["liaison"].settings.relay_queue, pool="prefork") as proc:
            try:
                _wait(lambda: _row(stack, relay.id).attempts >= 1, "the time-limited attempt was recorded", timeout=120)
            except AssertionError:
                proc.terminate()
                raise AssertionError(f"worker output:\n{proc.communicate(timeout=30)[0][-5000:]}") from None
        row = _row(stack, relay.id)
        assert row.done_at is None and row.next_attempt_at is not None  # a retry is scheduled
        assert (row.attempts, row.deliveries) == (1, 0)  # a failed attempt, not a poison delivery
        assert tarpit.count == 1
        with stack.db.transaction() as session:
            task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == cid)).one()
            assert "soft time limit (3s)" in (task.last_error or "")
