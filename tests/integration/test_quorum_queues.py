"""RabbitMQ quorum queues (LIAISON_RABBITMQ_QUEUE_TYPE=quorum) on the machine's RabbitMQ: every queue
Liaison declares is quorum, the flow runs, countdown retries come back (Celery's native delayed
delivery), poison is dead-lettered (by us, and by the broker's delivery limit as a backstop).

AMQP 0-9-1 has no way to read a queue's arguments back (a passive declare answers counts only), so a
queue's type is checked the way RabbitMQ enforces it: redeclaring it as ``classic`` fails with
PRECONDITION_FAILED (406), redeclaring it with the arguments Liaison uses succeeds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from amqp.exceptions import PreconditionFailed  # type: ignore[import-untyped]  # kombu's AMQP client
from kombu import Connection, Queue
from sqlalchemy import select

from app.celery_app import dead_letter_queue, work_queues
from app.consumers.command_readers import command_queue_of
from core.queue_types import QUORUM
from foundation.settings import Settings
from models import DeadLetter
from tests.integration import services
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread
from workers.providers.amqp import reply_queues

QUORUM_ENV = {"LIAISON_RABBITMQ_QUEUE_TYPE": QUORUM}


@pytest.fixture(scope="module")
def quorum_stack(vendor: ServerThread, vendor_secret: str, tmp_path_factory: Any) -> Iterator[Stack]:
    services.require(services.RABBITMQ_URL, "rabbitmq")
    tmp = tmp_path_factory.mktemp("quorum")
    built = build_stack(
        "sqlite-rabbitmq-quorum",
        database_url=f"sqlite:///{tmp / 'liaison.db'}",
        broker_url=services.RABBITMQ_URL,
        vendor_url=vendor.url,
        vendor_secret=vendor_secret,
        tmp=tmp,
        extra_env=QUORUM_ENV,
    )
    yield built
    built.close()


def _is_quorum(conn: Connection, queue: Any) -> bool:
    """True when ``queue`` exists as a quorum queue: RabbitMQ refuses it redeclared as classic and
    takes it redeclared as declared (each try on a channel of its own: a refusal closes it). It must
    exist already (a passive declare, 404 otherwise): the classic try would create it."""
    with conn.channel() as channel:
        channel.queue_declare(queue=queue.name, passive=True)
    classic = Queue(queue.name, durable=True, queue_arguments={**queue.queue_arguments, "x-queue-type": "classic"})
    channel = conn.channel()
    try:
        classic.bind(channel).declare()
    except PreconditionFailed:
        refused = True
    else:
        refused = False
    finally:
        if channel.is_open:
            channel.close()
    with conn.channel() as channel:
        queue.bind(channel).declare()  # raises if the arguments differ from what exists
    return refused


def _settings(queue: str) -> Settings:
    return Settings.from_env({"CELERY_BROKER_URL": services.RABBITMQ_URL, "LIAISON_QUEUE": queue, **QUORUM_ENV})


def test_every_queue_the_worker_declares_is_quorum(quorum_stack: Stack) -> None:
    settings = quorum_stack.settings
    queues = [*work_queues(settings), dead_letter_queue(settings.queue, settings.rabbitmq_queue_type)]
    assert [q.name for q in queues] == [
        settings.queue,
        settings.relay_queue,
        settings.calls_queue,
        f"{settings.queue}.dead",
    ]
    with quorum_stack.celery.connection_for_write() as conn:
        assert [_is_quorum(conn, q) for q in queues] == [True] * 4
        # the countdown topology Celery's worker declared (native delayed delivery), quorum too
        delayed = {
            "x-queue-type": "quorum",
            "x-overflow": "reject-publish",
            "x-message-ttl": 1000,
            "x-dead-letter-exchange": "celery_delayed_delivery",
            "x-dead-letter-strategy": "at-least-once",
        }
        assert _is_quorum(conn, Queue("celery_delayed_0", durable=True, queue_arguments=delayed))
    assert quorum_stack.celery.conf.broker_transport_options["confirm_publish"] is True


def test_vendor_reply_queues_and_command_queues_are_declared_quorum() -> None:
    """As the amqp vendor adapter and its consumer, and the channel-commands consumer, declare them."""
    services.require(services.RABBITMQ_URL, "rabbitmq")
    dead, live = reversed(reply_queues(f"liaison-test-replies-{uuid.uuid4().hex[:8]}", QUORUM))
    commands = command_queue_of(f"liaison-test-{uuid.uuid4().hex[:8]}", "shop", QUORUM)
    queues = [dead, live, commands]  # the dead one first: the live one dead-letters to it
    with Connection(services.RABBITMQ_URL) as conn:
        try:
            with conn.channel() as channel:
                for queue in queues:
                    queue.bind(channel).declare()
            assert [_is_quorum(conn, q) for q in queues] == [True, True, True]
        finally:
            with conn.channel() as channel:
                for queue in queues:
                    channel.queue_delete(queue.name)


def test_submit_to_completion_with_callbacks(quorum_stack: Stack) -> None:
    api_key, _, path = quorum_stack.new_client()
    cid = f"quorum-{uuid.uuid4().hex[:8]}"
    assert quorum_stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid).status_code == 202
    assert quorum_stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    hits = quorum_stack.callbacks.wait_for(
        lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=15, message="two callbacks"
    )
    assert [r.json()["type"] for r in hits if r.path == path] == ["task.accepted", "task.completed"]


def test_countdown_retries_come_back_through_the_broker(quorum_stack: Stack) -> None:
    """Two failed submits (countdowns of 0.2 and 0.4 s in the test policy: whole seconds at the
    broker) and a callback refused twice (0.2, 0.4 s): each retry is a countdown message that must
    come back for the task to finish and the callback to be delivered."""
    api_key, _, path = quorum_stack.new_client()
    quorum_stack.callbacks.set_status(path, [500, 503, 204])
    cid = f"quorum-retry-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"transient_failures": 2, "drop": ["job.accepted"]}}}
    assert quorum_stack.submit(api_key, body).status_code == 202
    done = quorum_stack.wait_for_task(api_key, cid, timeout=60)
    assert done["state"] == "succeeded"
    kinds = [e["kind"] for e in done["timeline"]]
    assert kinds.count("submit.attempt_failed") == 2
    quorum_stack.callbacks.wait_for(lambda reqs: len([r for r in reqs if r.path == path]) == 3, timeout=30)
    assert [r.status for r in quorum_stack.callbacks.posts_to(path)] == [500, 503, 204]


def _delayed_messages(conn: Connection) -> int:
    """Messages waiting in Celery's native delayed delivery queues (one per power of two seconds)."""
    total = 0
    with conn.channel() as channel:
        for level in range(28):
            total += channel.queue_declare(queue=f"celery_delayed_{level}", passive=True).message_count
    return total


def test_a_countdown_waits_at_the_broker_not_in_the_worker(quorum_stack: Stack) -> None:
    """A direct exchange would hand the message to the worker at once, to hold until due (with a
    quorum queue's static prefetch, a slot taken); through our topic exchanges it waits in the
    ``celery_delayed_*`` queues instead."""
    with quorum_stack.celery.connection_for_write() as conn:
        before = _delayed_messages(conn)
        quorum_stack.celery.send_task("liaison.sweep_outbox", countdown=40)
        deadline = time.monotonic() + 10
        while _delayed_messages(conn) <= before:
            assert time.monotonic() < deadline, "the countdown message is not waiting at the broker"
            time.sleep(0.1)


def test_a_message_naming_no_known_task_is_dead_lettered(quorum_stack: Stack) -> None:
    task_id = f"unknown-{uuid.uuid4().hex}"
    quorum_stack.celery.send_task("liaison.no_such_task", args=[1], task_id=task_id)
    deadline = time.monotonic() + 30
    while True:
        with quorum_stack.db.transaction() as session:
            letter = session.scalars(select(DeadLetter).where(DeadLetter.message_id == task_id[:64])).first()
        if letter is not None:
            break
        assert time.monotonic() < deadline, "no dead letter"
        time.sleep(0.2)
    assert letter.kind == "poison"
    settings = quorum_stack.settings
    with quorum_stack.celery.connection_for_write() as conn:
        dead = dead_letter_queue(settings.queue, settings.rabbitmq_queue_type)(conn.default_channel)
        deadline = time.monotonic() + 10
        while dead.queue_declare(passive=True).message_count < 1:
            assert time.monotonic() < deadline, "nothing reached the dead-letter queue"
            time.sleep(0.2)


def test_the_broker_dead_letters_a_message_returned_past_the_delivery_limit() -> None:
    """The backstop: a message put back more often than LIAISON_MAX_DELIVERIES + 1 (one more than
    our count allows, so ours decides first when the task runs at all) leaves the queue for
    ``<queue>.dead`` by RabbitMQ's own count. No worker here: the test takes and returns it."""
    services.require(services.RABBITMQ_URL, "rabbitmq")
    settings = _settings(f"liaison-test-{uuid.uuid4().hex[:8]}")
    work: Any = work_queues(settings)[0]
    dead = dead_letter_queue(settings.queue, settings.rabbitmq_queue_type)
    assert work.queue_arguments["x-delivery-limit"] == settings.max_deliveries + 1
    with Connection(services.RABBITMQ_URL) as conn:
        channel = conn.channel()
        try:
            for queue in (dead, work):
                queue.bind(channel).declare()
            conn.Producer(channel).publish({"x": 1}, exchange=work.exchange, routing_key=work.routing_key)
            returns = 0
            deadline = time.monotonic() + 30
            while dead.bind(channel).queue_declare(passive=True).message_count == 0:
                assert time.monotonic() < deadline, f"not dead-lettered after {returns} returns"
                message = work.bind(channel).get(no_ack=False)
                if message is None:
                    time.sleep(0.05)
                    continue
                message.requeue()
                returns += 1
            assert returns == settings.max_deliveries + 2  # returned more often than the limit
        finally:
            for queue in (work, dead):
                channel.queue_delete(queue.name)
            channel.close()
