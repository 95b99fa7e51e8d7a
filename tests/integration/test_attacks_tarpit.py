"""Tarpits: one tenant's slow callback endpoint cannot hold the relay slots another tenant needs,
and relays run on their own queue, apart from submissions.

Tenant A's endpoint is a loopback tarpit (a status line, then one header every 2 s, never done).
With LIAISON_RELAY_CLIENT_CONCURRENCY=1 A holds at most one connection; its other relays wait for
a slot without counting attempts, and tenant B's callback is delivered meanwhile.
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
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import create_app
from app.celery_app import work_queues
from foundation.settings import Settings
from models import OutboxMessage
from models.base import utcnow
from models.messages import OutboxKind
from models.service import add_outbox
from models.task import ExternalTask
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack, delete_queues, liaison_env
from tests.support.listeners import Tarpit
from tests.support.servers import ServerThread

CAP = 1
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def capped_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # The tarpit listens on a loopback port of its own: the outbound guard must let it through here
    # (tests/integration/test_attacks_ssrf.py shows what it refuses).
    # The relay's own call deadline is what cuts a tarpit off (test_attacks_ssrf.py); it is long here
    # so that A's relays hold their slot and the cap is what keeps B's callback moving.
    extra = {
        "LIAISON_RELAY_CLIENT_CONCURRENCY": str(CAP),
        "LIAISON_RELAY_SLOT_WAIT_S": "0.5",
        "LIAISON_OUTBOUND_ALLOW": "127.0.0.1",
        "LIAISON_RELAY_TIMEOUT_S": "120",
    }
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)


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


def _slot_waits() -> float:
    return REGISTRY.get_sample_value("liaison_relay_deliveries_total", {"outcome": "slot_wait"}) or 0.0


@pytest.mark.timeout(240)
def test_a_tarpit_endpoint_does_not_delay_another_tenants_callback(capped_stack: Stack, tarpit: Tarpit) -> None:
    stack = capped_stack
    key_a, _, _ = stack.new_client()
    key_b, _, path_b = stack.new_client()
    tag = uuid.uuid4().hex[:8]
    a_ids = [f"tarpit-a-{tag}-{i}" for i in range(5)]
    for cid in a_ids:
        body = {"correlation_id": cid, "input": "slow endpoint", "callback_url": f"{tarpit.url}/a"}
        assert stack.submit(key_a, body).status_code == 202
    # A's relays pile up: one is in the tarpit, the others are waiting (accepted and completed each).
    _wait(lambda: tarpit.count >= 1, "a relay reached the tarpit")
    _wait(lambda: sum(r.done_at is None for r in _relays(stack, a_ids)) >= 2 * len(a_ids), "A's relays piled up")
    waits_before = _slot_waits()

    b_id = f"tarpit-b-{tag}"
    assert stack.submit(key_b, {"correlation_id": b_id, "input": "fast endpoint"}).status_code == 202
    stack.callbacks.wait_for(
        lambda reqs: any(r.path == path_b and r.json()["type"] == "task.completed" for r in reqs), timeout=90
    )

    # B was served while A's relays are still stuck: the tarpit never held more than A's share.
    assert tarpit.open <= CAP and tarpit.max_open <= CAP
    pending = [r for r in _relays(stack, a_ids) if r.done_at is None]
    assert len(pending) >= 2 * len(a_ids) - CAP
    started = [r for r in pending if r.deliveries > 0]
    assert len(started) <= CAP
    # The others were re-queued for a slot, over and over, and that cost them nothing:
    # no attempt, no poison delivery.
    assert _slot_waits() > waits_before
    for row in pending:
        if row not in started:
            assert (row.attempts, row.deliveries) == (0, 0), row.id


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
        return session.get(OutboxMessage, outbox_id)


@pytest.mark.timeout(240)
def test_relays_run_on_their_own_queue(capped_stack: Stack, vendor_secret: str, tmp_path: Path) -> None:
    """A relay row is published to the relay queue: a worker on the work queue alone runs the
    submission published after it but never the relay; a relay-queue worker then delivers it."""
    stack = capped_stack
    with _side_app(stack, vendor_secret, tmp_path) as (app, env):
        settings, celery = app.extensions["liaison"].settings, app.extensions["celery"]
        api_key, _, path = stack.new_client()
        cid, submit_id = stack.unpublished_task(api_key, {"input": "routed"})
        relay = _relay_row(stack, cid)
        publisher = app.extensions["liaison"].publisher
        assert publisher.publish([relay]) == 1 and publisher.publish([_row(stack, submit_id)]) == 1

        def depth(queue) -> int:  # type: ignore[no-untyped-def]
            with celery.connection_for_write() as conn:
                return queue(conn.default_channel).queue_declare(passive=True).message_count

        work, relay_queue = work_queues(settings)
        assert (depth(work), depth(relay_queue)) == (1, 1)

        with _worker(env, work.name):
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
    capped_stack: Stack,
    vendor_secret: str,
    tmp_path: Path,
    tarpit: Tarpit,
) -> None:
    """In the prefork pool Celery's soft limit fires inside the call to the tarpit: the attempt is
    recorded as failed and retried per policy (not lost until the sweep's lease runs out)."""
    stack = capped_stack
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
