"""Poison messages: never looped forever, never dropped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.celery_app import dead_letter_queue, work_queues
from foundation.settings import Settings
from models import DeadLetter, OutboxMessage
from models.base import utcnow
from service.outbox_rows import new_message_id
from tests.integration.stack import Stack, delete_queues, liaison_env

ROOT = Path(__file__).resolve().parents[2]


def _wait_for_dead_letter(stack: Stack, timeout: float = 30, **where: object) -> DeadLetter:
    deadline = time.monotonic() + timeout
    while True:
        with stack.db.transaction() as session:
            query = select(DeadLetter)
            for column, value in where.items():
                query = query.where(getattr(DeadLetter, column) == value)
            letter = session.scalars(query).first()
        if letter is not None:
            return letter
        if time.monotonic() > deadline:
            raise AssertionError(f"no dead letter with {where} within {timeout}s")
        time.sleep(0.2)


@pytest.mark.timeout(120)
def test_a_message_that_kills_its_worker_is_dead_lettered_after_the_limit(
    pair_stack: Stack, vendor_secret: str
) -> None:
    _killed_worker_is_dead_lettered(pair_stack, vendor_secret, "poison", {})


@pytest.mark.timeout(120)
def test_on_quorum_queues_our_count_dead_letters_a_worker_killer_before_the_brokers_limit(
    pair_stack: Stack, vendor_secret: str
) -> None:
    """LIAISON_RABBITMQ_QUEUE_TYPE=quorum: the queue's x-delivery-limit is one above ours, so the
    message that kills its worker still ends as our dead letter (seen in the console), not only in
    the broker's ``<queue>.dead``."""
    if not pair_stack.settings.broker_url.startswith("amqp"):
        pytest.skip("quorum queues are RabbitMQ's")
    # A queue (and exchange) name of its own: RabbitMQ keeps an exchange's type (direct above) for good.
    _killed_worker_is_dead_lettered(
        pair_stack, vendor_secret, "poison-quorum", {"LIAISON_RABBITMQ_QUEUE_TYPE": "quorum"}
    )


def _killed_worker_is_dead_lettered(pair_stack: Stack, vendor_secret: str, suffix: str, extra: dict[str, str]) -> None:
    queue = f"{pair_stack.queue}-{suffix}"
    env = {
        **os.environ,
        **liaison_env(
            database_url=pair_stack.settings.database_url,
            broker_url=pair_stack.settings.broker_url,
            vendor_url=pair_stack.vendor_url,
            vendor_secret=vendor_secret,
            public_url=pair_stack.settings.public_url,
        ),
        "LIAISON_QUEUE": queue,
        "LIAISON_MAX_DELIVERIES": "2",
        "PYTHONPATH": str(ROOT),
        **extra,
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "app.make_celery",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "--include",
            "tests.integration.poison_tasks",
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"poison-{uuid.uuid4().hex[:6]}@%h",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # A plain session: the app's sessions publish new outbox rows at commit (models.publishing),
        # and this one must reach only the killing task below.
        with Session(pair_stack.db.engine, expire_on_commit=False) as session, session.begin():
            row = OutboxMessage(message_id=new_message_id(), kind="relay", payload={}, created_at=utcnow())
            session.add(row)
            session.flush()
            outbox_id = row.id
        # Declared exactly as that worker declares it (RabbitMQ refuses a queue redeclared with other arguments).
        work_queue = work_queues(Settings.from_env(env))[0]
        pair_stack.celery.send_task(
            "liaison.test.kill_worker", args=[outbox_id], queue=work_queue, declare=[work_queue]
        )

        try:
            letter = _wait_for_dead_letter(pair_stack, outbox_id=outbox_id, timeout=60)
        except AssertionError:
            worker.terminate()
            raise AssertionError(f"worker output:\n{worker.communicate(timeout=20)[0][-5000:]}") from None
        assert letter.kind == "poison" and letter.fault == "system"
        assert "without finishing" in letter.error
        with pair_stack.db.transaction() as session:
            stored = session.get(OutboxMessage, outbox_id)
            assert stored is not None
            assert stored.deliveries == 3  # two runs killed it, the third did not run
        assert worker.poll() is None, "the worker itself must survive its children dying"
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        delete_queues(pair_stack.celery, Settings.from_env(env))


def test_a_message_naming_no_known_task_is_dead_lettered(pair_stack: Stack) -> None:
    task_id = f"unknown-{uuid.uuid4().hex}"
    pair_stack.celery.send_task("liaison.no_such_task", args=[1], task_id=task_id)
    letter = _wait_for_dead_letter(pair_stack, message_id=task_id[:64])
    assert letter.kind == "poison" and letter.payload["task"] == "liaison.no_such_task"
    assert "no registered task" in letter.error
    if pair_stack.settings.broker_url.startswith("amqp"):
        # RabbitMQ also keeps the rejected message in the queue's dead-letter exchange.
        with pair_stack.celery.connection_for_write() as conn:
            dead = dead_letter_queue(pair_stack.queue)(conn.default_channel)
            deadline = time.monotonic() + 10
            while dead.queue_declare(passive=True).message_count < 1:
                assert time.monotonic() < deadline, "nothing reached the dead-letter queue"
                time.sleep(0.2)


def test_a_message_that_cannot_be_decoded_is_dead_lettered(pair_stack: Stack) -> None:
    message_id = f"garbage-{uuid.uuid4().hex}"
    queue = pair_stack.celery.conf.task_queues[0]
    with pair_stack.celery.connection_for_write() as conn:
        conn.Producer().publish(
            b"\xff{not json",
            exchange=queue.exchange,
            routing_key=queue.routing_key,
            declare=[queue],
            content_type="application/json",
            content_encoding="utf-8",
            headers={"id": message_id, "task": "liaison.relay"},
        )
    letter = _wait_for_dead_letter(pair_stack, message_id=message_id[:64])
    assert letter.kind == "poison" and "decoded" in letter.error
