"""Domain apps over a broker (issue 13, point 1): a domain app that never speaks HTTP sends
SubmitTask/CancelTask commands and receives its signed ``task.*`` events, over RabbitMQ (postgres
database, RabbitMQ Celery broker) and over Redis Streams (sqlite database, Redis Celery broker).

Each module run has a channel broker of its own, on a free loopback port, with a unique channel
prefix: a RabbitMQ node (``bench.services.RabbitMQNode``: the machine's RabbitMQ started a second
time under its own node name and database) or a redis-server (append-only file, fsync always, so a
restart keeps what XADD confirmed). The Celery broker stays the machine's, shared by the suite.

The broker restart is a real one: the channel's server is stopped (``rabbitmqctl stop``; SIGTERM for
redis-server) while events are being published and commands sent, and started again on the same
port. Every connection drops mid-stream, publishes go unconfirmed and reconnects are refused until
it is back; durable queues, the exchange and persistent messages survive, as they do in production.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Producer, Queue
from sqlalchemy import func, select

from app.consumers.command_readers import AmqpCommandConsumer, RedisCommandConsumer
from bench.services import RabbitMQNode, RedisServer
from models.client import Client
from models.messages import OutboxKind, OutboxMessage, ProcessedMessage
from models.task import ExternalTask, TaskEvent
from service.credentials import create_client, set_channel
from tests.integration import services
from tests.integration.conftest import _stack
from tests.integration.dispatch_support import vendor_jobs, wait
from tests.integration.stack import Stack
from tests.support.servers import ServerThread
from webhooks.signing import verify
from wire.channel_messages import (
    CANCEL_TASK,
    SUBMIT_TASK,
    command_queue,
    command_stream,
    events_exchange,
    events_stream,
    row_message_id,
)

PARAMS = [("amqp", ("postgres", "rabbitmq")), ("redis", ("sqlite", "redis"))]


@dataclass
class DomainApp:
    """A domain app that speaks only to the broker: it sends commands and reads its events."""

    channel: str
    client: str
    secret: str
    prefix: str
    url: str
    events: list[dict[str, Any]] = field(default_factory=list)
    traceparents: dict[str, str | None] = field(default_factory=dict)  # message_id -> the event's header
    queue: str = ""
    _last_id: str = "0-0"

    def setup(self) -> None:
        if self.channel == "amqp":
            self.queue = f"{self.prefix}.domain-app.{self.client}"
            with Connection(self.url) as conn:
                exchange = Exchange(events_exchange(self.prefix), type="topic", durable=True)
                exchange(conn.default_channel).declare()
                Queue(self.queue, exchange, routing_key=f"{self.client}.#", durable=True)(
                    conn.default_channel
                ).declare()
                name = command_queue(self.prefix, self.client)
                Queue(name, exchange="", routing_key=name, durable=True)(conn.default_channel).declare()

    def send(
        self,
        command_type: str | None,
        body: bytes | dict[str, Any],
        message_id: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        message_id = message_id or f"cmd_{uuid.uuid4().hex}"
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        if self.channel == "amqp":
            with Connection(self.url, transport_options={"confirm_publish": True}) as conn:
                properties: dict[str, Any] = {"message_id": message_id}
                if command_type is not None:
                    properties["type"] = command_type
                Producer(conn.default_channel).publish(
                    raw,
                    exchange="",
                    routing_key=command_queue(self.prefix, self.client),
                    content_type="application/json",
                    content_encoding="utf-8",
                    delivery_mode=2,
                    mandatory=True,
                    headers={"traceparent": traceparent} if traceparent else None,
                    **properties,
                )
        else:
            fields: dict[Any, Any] = {"message_id": message_id, "body": raw}
            if command_type is not None:
                fields["type"] = command_type
            if traceparent:
                fields["traceparent"] = traceparent
            redis.Redis.from_url(self.url).xadd(command_stream(self.prefix, self.client), fields)
        return message_id

    def submit(
        self, correlation_id: str, job_input: Any, message_id: str | None = None, traceparent: str | None = None
    ) -> str:
        body = {"correlation_id": correlation_id, "input": job_input}
        return self.send(SUBMIT_TASK, body, message_id, traceparent)

    def poll(self) -> None:
        """Take what arrived; each event's signature is verified with the client's secret."""
        if self.channel == "amqp":
            with Connection(self.url) as conn:
                while (message := conn.default_channel.basic_get(self.queue, no_ack=True)) is not None:
                    headers = {k: v for k, v in (message.headers or {}).items() if isinstance(v, str)}
                    body = message.body if isinstance(message.body, bytes) else message.body.encode()
                    self._keep(body, headers, message.delivery_info["routing_key"])
        else:
            read: Any = redis.Redis.from_url(self.url).xread({events_stream(self.prefix, self.client): self._last_id})
            for _stream, entries in read or []:
                for entry_id, fields in entries:
                    self._last_id = entry_id.decode()
                    headers = {
                        k.decode(): v.decode() for k, v in fields.items() if k.startswith((b"webhook-", b"traceparent"))
                    }
                    self._keep(fields[b"body"], headers, f"{events_stream(self.prefix, self.client)} {self._last_id}")

    def _keep(self, body: bytes, headers: dict[str, str], where: str) -> None:
        message_id = verify([self.secret], headers, body, time.time())
        event = json.loads(body)
        assert event["message_id"] == message_id
        self.events.append({**event, "_where": where})
        self.traceparents[message_id] = headers.get("traceparent")

    def wait_for(self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 30, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, redis.RedisError):  # the broker is being restarted by the test
                self.poll()
            if done(self.events):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{what or 'events'} not received in {timeout}s: {self.events}")
            time.sleep(0.1)

    def of(self, correlation_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("correlation_id") == correlation_id]


def completed(app: DomainApp, *cids: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: all(any(e["type"] == "task.completed" for e in app.of(cid)) for cid in cids)


@dataclass
class Rig:
    channel: str
    stack: Stack
    consumer: AmqpCommandConsumer | RedisCommandConsumer
    thread: threading.Thread
    url: str
    prefix: str
    restart: Callable[..., None]

    def domain_app(self) -> DomainApp:
        name = f"dom-{uuid.uuid4().hex[:8]}"
        with self.stack.db.transaction() as session:
            client, _, secret = create_client(session, name, None)
            set_channel(client, self.channel)
        app = DomainApp(self.channel, name, secret, self.prefix, self.url)
        app.setup()  # the command queue is declared: commands sent before the consumer looks wait there
        return app


@pytest.fixture(scope="module", params=PARAMS, ids=[p[0] for p in PARAMS])
def rig(request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory) -> Iterator[Rig]:
    channel, pair = request.param
    prefix = f"lt{uuid.uuid4().hex[:8]}"
    server: RabbitMQNode | RedisServer
    if channel == "amqp":
        services.require(services.RABBITMQ_URL, "RabbitMQ")  # the Celery broker; the node is our own
        server = RabbitMQNode().start()
    else:
        server = RedisServer(persist=True).start()
    url = server.url

    def restart(while_down: Callable[[], None] = lambda: time.sleep(2)) -> None:
        """Stops the channel's broker, runs ``while_down`` (publishes and commands fail meanwhile),
        then starts it again on the same port, whatever ``while_down`` raised."""
        server.stop()
        try:
            while_down()
        finally:
            server.start()

    extra = {
        f"LIAISON_CHANNEL_{channel.upper()}_URL": url,
        "LIAISON_CHANNEL_PREFIX": prefix,
        "LIAISON_CHANNEL_TIMEOUT_S": "3",
        "LIAISON_RELAY_SCHEDULE_S": "0.5,1,1,1,2,2,2,2,2,2",
        "LIAISON_RELAY_MAX_ATTEMPTS": "30",
    }
    request.param = pair  # _stack reads (db, broker) from it
    stacks = _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)
    stack = next(stacks)
    consumer: AmqpCommandConsumer | RedisCommandConsumer
    if channel == "amqp":
        consumer = AmqpCommandConsumer(stack.ctx, refresh_s=0.3)
    else:
        consumer = RedisCommandConsumer(stack.ctx, block_ms=200, refresh_s=0.3)

    def run() -> None:
        with stack.app.app_context():
            consumer.run()

    thread = threading.Thread(target=run, name="test-channel-commands", daemon=True)
    thread.start()
    yield Rig(channel, stack, consumer, thread, url, prefix, restart)
    consumer.should_stop = True
    thread.join(15)
    next(stacks, None)
    server.cleanup()


def _relay_ids(stack: Stack, correlation_id: str) -> list[str]:
    with stack.db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == correlation_id))
        return list(
            session.scalars(
                select(OutboxMessage.message_id)
                .where(OutboxMessage.task_id == task_id, OutboxMessage.kind == OutboxKind.RELAY)
                .order_by(OutboxMessage.sequence)
            )
        )


def describe(events: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"  {e['type']:<15} seq={e.get('sequence')} {e.get('correlation_id')} at {e['_where']}" for e in events
    )


def test_a_domain_app_that_never_speaks_http_completes_tasks(rig: Rig) -> None:
    app = rig.domain_app()
    cids = [f"ch-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for n, cid in enumerate(cids):
        # completed 1.5 s after accepted, not 0.3: a busy CI run once delivered a job.accepted webhook
        # after its job.completed, and a late accepted is (rightly) only recorded on the timeline
        app.submit(cid, {"n": n, "simulate": {"complete_delay_s": 1.5}})
    app.wait_for(completed(app, *cids), what="three completions")
    time.sleep(0.5)
    app.poll()
    print(f"\n{rig.channel}: events received by {app.client}:\n{describe(app.events)}")
    for cid in cids:
        mine = app.of(cid)
        assert [(e["type"], e["sequence"]) for e in mine] == [("task.accepted", 1), ("task.completed", 2)]
        assert mine[1]["state"] == "succeeded"
        # the same message_id as the HTTP callback of that event (which, with no URL, was skipped)
        assert [e["message_id"] for e in mine] == _relay_ids(rig.stack, cid)
        where = [e["_where"] for e in mine]
        if rig.channel == "amqp":
            assert where == [f"{app.client}.task.accepted", f"{app.client}.task.completed"]
        else:
            assert all(w.startswith(f"{rig.prefix}:{app.client}:events ") for w in where)


def test_a_commands_traceparent_goes_to_the_vendor_and_comes_back_on_every_event(rig: Rig) -> None:
    """Issue 22: a command's W3C traceparent is the task's trace (tracing is off in this stack, so
    Liaison forwards it as it came): the vendor's job was created in it, and each event carries it."""
    app = rig.domain_app()
    cid = f"tp-{uuid.uuid4().hex[:8]}"
    traceparent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    app.submit(cid, {"n": 1}, traceparent=traceparent)
    app.wait_for(completed(app, cid), what="the completion")
    assert [(e["type"], app.traceparents[e["message_id"]]) for e in app.of(cid)] == [
        ("task.accepted", traceparent),
        ("task.completed", traceparent),
    ]
    with rig.stack.db.transaction() as session:
        stored, reference = session.execute(
            select(ExternalTask.traceparent, ExternalTask.reference).where(ExternalTask.correlation_id == cid)
        ).one()
    assert stored == traceparent
    jobs = rig.stack.vendor("GET", "/_sim/jobs").json()["jobs"]
    assert [job["traceparent"] for job in jobs if job["idempotency_key"] == reference] == [traceparent]


def test_a_duplicate_command_is_taken_once(rig: Rig) -> None:
    app = rig.domain_app()
    cid, other = f"dup-{uuid.uuid4().hex[:8]}", f"dup-{uuid.uuid4().hex[:8]}"
    message_id = app.submit(cid, {"n": 1})
    app.submit(other, {"n": 2}, message_id=message_id)  # same MessageId: the same command, resent
    app.wait_for(completed(app, cid), what="the completion")
    time.sleep(1.0)
    app.poll()
    assert {e["correlation_id"] for e in app.events} == {cid}
    assert [e["type"] for e in app.events] == ["task.accepted", "task.completed"]
    if rig.channel == "redis":  # taken commands are acked and deleted: nothing pending, nothing left
        stream = command_stream(rig.prefix, app.client)
        client = redis.Redis.from_url(rig.url)
        assert client.xlen(stream) == 0 and client.xpending(stream, "liaison")["pending"] == 0
    with rig.stack.db.transaction() as session:
        assert session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == other)) is None
        seen = session.scalars(select(ProcessedMessage).where(ProcessedMessage.message_id == message_id)).all()
        assert [(p.source, p.message_type) for p in seen] == [(f"channel:{app.client}", SUBMIT_TASK)]


def test_an_invalid_command_gets_a_rejection_event(rig: Rig) -> None:
    app = rig.domain_app()
    missing = app.send(SUBMIT_TASK, {"correlation_id": "no-input"})
    junk = app.send(SUBMIT_TASK, b"{not json")
    untyped = app.send(None, {"correlation_id": "x", "input": {}})
    unknown = app.send(CANCEL_TASK, {"correlation_id": "never-submitted"})
    too_deep = app.send(SUBMIT_TASK, {"input": json.loads("[" * 40 + "]" * 40)})
    app.wait_for(lambda events: len(events) >= 5, what="five rejections")
    by_command = {e["command_message_id"]: e for e in app.events}
    assert all(e["type"] == "task.rejected" for e in app.events)
    assert by_command[missing]["status"] == 422
    assert by_command[missing]["errors"] == [{"field": "input", "message": "required"}]
    assert by_command[junk]["status"] == 400
    assert by_command[untyped]["status"] == 400 and by_command[untyped]["command_type"] is None
    assert by_command[unknown]["status"] == 404 and by_command[unknown]["correlation_id"] == "never-submitted"
    assert by_command[too_deep]["status"] == 422
    with rig.stack.db.transaction() as session:
        client_id = session.scalar(select(Client.id).where(Client.name == app.client))
        assert session.scalar(select(ExternalTask.id).where(ExternalTask.client_id == client_id)) is None


def test_a_cancel_command_cancels(rig: Rig) -> None:
    app = rig.domain_app()
    cid = f"cancel-{uuid.uuid4().hex[:8]}"
    app.submit(cid, {"simulate": {"complete_delay_s": 30}})
    app.wait_for(lambda events: any(e["type"] == "task.accepted" for e in app.of(cid)), what="the acceptance")
    app.send(CANCEL_TASK, {"correlation_id": cid, "reason": "changed my mind"})
    app.wait_for(completed(app, cid), what="the cancellation")
    assert app.of(cid)[-1]["state"] == "canceled"


def test_a_broker_restart_in_the_middle_loses_nothing_and_doubles_nothing(rig: Rig) -> None:
    app = rig.domain_app()
    before = [f"rs-a-{uuid.uuid4().hex[:6]}" for _ in range(4)]
    after = [f"rs-b-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for cid in before:  # held open at the vendor until the test completes them, with the broker down
        app.submit(cid, {"simulate": {"complete_delay_s": 3600}})
    app.wait_for(lambda events: len(events) >= 1, what="a first event")

    def all_at_the_vendor() -> list[dict[str, Any]]:
        found = vendor_jobs(rig.stack, before)
        return found if len(found) == len(before) else []

    jobs = wait(all_at_the_vendor, "every job at the vendor")

    def complete_while_down() -> None:
        """The completions come while the broker is down: their publishes fail, and the outbox
        retries them once it is back (waited for by the database's word, not a sleep)."""
        for job in jobs:
            assert rig.stack.vendor("POST", f"/_sim/jobs/{job['job_id']}/complete", json={}).status_code == 200
        wait(
            lambda: _failed_publishes(rig.stack, before) > 0, "a completion's publish failed while the broker was down"
        )

    rig.restart(while_down=complete_while_down)
    for cid in after:
        for attempt in range(50):  # the broker may still be coming back
            try:
                app.submit(cid, {"n": 1})
                break
            except (OSError, redis.RedisError, Exception):
                if attempt == 49:
                    raise
                time.sleep(0.2)
    app.wait_for(completed(app, *before, *after), timeout=60, what="every completion")
    time.sleep(1.0)
    app.poll()
    print(f"\n{rig.channel} restart: events received by {app.client}:\n{describe(app.events)}")
    ids = [e["message_id"] for e in app.events]
    expected = [mid for cid in before + after for mid in _relay_ids(rig.stack, cid)]
    assert sorted(set(ids)) == sorted(expected)  # nothing lost
    # Nothing doubled that the broker confirmed. A publish the restart cut off after the broker took
    # it (no reply came back) is retried and lands twice, the same message: delivery is at least once
    # and the consumer deduplicates on message_id (docs/design.md §4, over a broker).
    doubled = {mid for mid in ids if ids.count(mid) > 1}
    for mid in doubled:
        copies = [{k: v for k, v in e.items() if k != "_where"} for e in app.events if e["message_id"] == mid]
        assert all(copy == copies[0] for copy in copies), f"{mid} arrived with two bodies"
    with rig.stack.db.transaction() as session:
        retried_ids = set(
            session.scalars(
                select(OutboxMessage.message_id).where(
                    OutboxMessage.message_id.in_([row_message_id(mid) for mid in doubled]),
                    OutboxMessage.attempts > 1,  # its first publish failed (a success counts one too)
                )
            )
        )
    assert {row_message_id(mid) for mid in doubled} == retried_ids, "a confirmed event was published again"
    for cid in before + after:
        assert [e["sequence"] for e in app.of(cid)] == [1, 2]  # in order
    with rig.stack.db.transaction() as session:
        pending = session.scalars(
            select(OutboxMessage.id).where(OutboxMessage.kind == OutboxKind.CHANNEL, OutboxMessage.done_at.is_(None))
        ).all()
        assert pending == []
    # the outage was real: publishes failed and the outbox re-drove them
    retried = _failed_publishes(rig.stack, before)
    print(f"{rig.channel} restart: {retried} failed publish attempts re-driven by the outbox")
    assert retried > 0


def _failed_publishes(stack: Stack, correlation_ids: list[str]) -> int:
    with stack.db.transaction() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(TaskEvent)
                .join(ExternalTask, ExternalTask.id == TaskEvent.task_id)
                .where(ExternalTask.correlation_id.in_(correlation_ids), TaskEvent.kind == "channel.attempt_failed")
            )
            or 0
        )


def test_operators_put_a_client_on_a_channel_and_back(rig: Rig) -> None:
    stack = rig.stack
    api_key, _, _ = stack.new_client()
    name = stack.client_name(api_key)
    answer = stack.admin("PUT", f"/clients/{name}/channel", json={"channel": rig.channel})
    assert answer.status_code == 200 and answer.json()["channel"] == rig.channel
    assert stack.admin("GET", f"/clients/{name}").json()["channel"] == rig.channel
    refused = stack.admin("PUT", f"/clients/{name}/channel", json={"channel": "kafka"})
    assert refused.status_code == 422
    assert stack.admin("PUT", f"/clients/{name}/channel", json={"channel": None}).json()["channel"] is None


def test_a_client_on_http_and_a_channel_gets_the_same_events_on_both(rig: Rig) -> None:
    """Besides HTTP: one event, two deliveries, the same message_id, body and sequence."""
    stack = rig.stack
    api_key, secret, path = stack.new_client()
    name = stack.client_name(api_key)
    assert stack.admin("PUT", f"/clients/{name}/channel", json={"channel": rig.channel}).status_code == 200
    app = DomainApp(rig.channel, name, secret, rig.prefix, rig.url)
    app.setup()
    cid = f"both-{uuid.uuid4().hex[:8]}"
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}).status_code == 202
    app.wait_for(completed(app, cid), what="the channel's completion")
    posts = stack.callbacks.wait_for(
        lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=20, message="two callbacks"
    )
    http = [r.json() for r in posts if r.path == path]
    channel = [{k: v for k, v in e.items() if k != "_where"} for e in app.events]
    assert channel == http  # same bodies: message_id, sequence, state, outcome, occurred_at


def _progress_recorded(stack: Stack, correlation_id: str) -> list[dict[str, Any]]:
    """The reports the task took (``event.progress`` on its timeline), in the order it took them."""
    with stack.db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == correlation_id))
        return list(
            session.scalars(
                select(TaskEvent.detail)
                .where(TaskEvent.task_id == task_id, TaskEvent.kind == "event.progress")
                .order_by(TaskEvent.id)
            )
        )


def test_progress_over_a_slow_endpoint_and_a_channel_keeps_one_body_per_message_id(rig: Rig) -> None:
    """Issue 22, point 4. A client on HTTP and the channel whose endpoint holds its callbacks (it
    answers once every report was recorded, or after 2.5 s, under the 3 s relay deadline), and a
    channel-only client, while the vendor sends nineteen progress reports: an HTTP callback and a
    channel event with the same message_id carry the same body, each way's sequence only grows, and
    each way's last progress is the last figure the task took."""
    stack = rig.stack
    api_key, secret, path = stack.new_client()
    name = stack.client_name(api_key)
    assert stack.admin("PUT", f"/clients/{name}/channel", json={"channel": rig.channel}).status_code == 200
    both = DomainApp(rig.channel, name, secret, rig.prefix, rig.url)
    both.setup()
    only = rig.domain_app()
    gate = stack.callbacks.hold(path, at_most_s=2.5)
    reports = [5.0 * n for n in range(1, 20)]  # 5 % … 95 %
    knobs = {"accept_delay_s": 0.1, "progress": reports, "progress_interval_s": 0.05, "complete_delay_s": 2.0}
    cid, alone = f"prog-{uuid.uuid4().hex[:8]}", f"prog-only-{uuid.uuid4().hex[:8]}"
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": knobs}}).status_code == 202
    only.submit(alone, {"simulate": knobs})
    deadline = time.monotonic() + 2.5
    while len(_progress_recorded(stack, cid)) < len(reports) and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.set()
    both.wait_for(completed(both, cid), timeout=60, what="the channel's completion")
    only.wait_for(completed(only, alone), timeout=60, what="the channel-only completion")
    stack.callbacks.wait_for(  # a held callback that outlived its deadline on a loaded machine is
        # retried on the relay's schedule, and the completion waits behind it (callback order): minutes
        lambda reqs: any(r.path == path and r.json()["type"] == "task.completed" for r in reqs),
        timeout=180,
        message="the HTTP completion",
    )
    time.sleep(1.0)  # anything still on its way
    both.poll()
    only.poll()
    http = [r.json() for r in stack.callbacks.posts_to(path) if 200 <= r.status < 300]
    channel = [{k: v for k, v in e.items() if k != "_where"} for e in both.of(cid)]
    lonely = [{k: v for k, v in e.items() if k != "_where"} for e in only.of(alone)]
    for label, events in (("http", http), ("channel", channel), ("channel only", lonely)):
        seen = [(e["type"], e["sequence"], e.get("percent")) for e in events]
        print(f"\n{rig.channel} {label}: {seen}")
    bodies: dict[str, dict[str, Any]] = {}
    for body in http + channel:
        assert bodies.setdefault(body["message_id"], body) == body, f"{body['message_id']} carried two bodies"
    assert len({b["message_id"] for b in channel}) == len(channel), "an event was received twice"
    for events, task in ((http, cid), (channel, cid), (lonely, alone)):
        sequences = [e["sequence"] for e in events]
        assert sequences == sorted(set(sequences))  # in order, each once
        assert events[0]["type"] == "task.accepted" and events[-1]["type"] == "task.completed"
        progress = [e for e in events if e["type"] == "task.progress"]
        last = _progress_recorded(stack, task)[-1]["percent"]
        assert progress and progress[-1]["percent"] == last, (task, [p["percent"] for p in progress], last)
    assert len([e for e in http if e["type"] == "task.progress"]) < len(reports)  # HTTP was behind: coalesced


def test_the_channel_commands_process_takes_commands(rig: Rig, tmp_path) -> None:
    """The Procfile's ``channel-commands`` line, as a real process: a task submitted over the channel
    completes through it alone (the in-test consumer is stopped first: this test runs last), and
    SIGTERM ends it cleanly."""
    import os

    from tests.integration.processes import liaison_command, stop

    stack = rig.stack
    rig.consumer.should_stop = True
    rig.thread.join(10)
    app = rig.domain_app()
    settings = stack.settings
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url,
        "CELERY_BROKER_URL": settings.broker_url,
        "LIAISON_QUEUE": settings.queue,
        "LIAISON_VAR_DIR": str(tmp_path),
        f"LIAISON_CHANNEL_{rig.channel.upper()}_URL": rig.url,
        "LIAISON_CHANNEL_PREFIX": rig.prefix,
        "LIAISON_LOG_LEVEL": "info",
        # the same provider as the stack's: the process parses submits against it
        "LIAISON_PROVIDERS": "sim",
        "LIAISON_PROVIDER_SIM_BASE_URL": settings.providers["sim"].base_url,
        "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": ",".join(settings.providers["sim"].webhook_secrets),
    }
    proc = liaison_command("channel-commands", env)
    try:
        cid = f"proc-{uuid.uuid4().hex[:8]}"
        app.submit(cid, {"n": 1})
        app.wait_for(completed(app, cid), what="the completion")
    finally:
        stop(proc)
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.returncode == 0, output
    assert f"consuming commands of {rig.channel} (" in output
