"""Commands from domain apps over a broker channel: SubmitTask and CancelTask, taken like the API's.

One command is one transaction: its MessageId recorded in the inbox (``ProcessedMessage``, source
``channel:<client>``: a second delivery, or a resend, changes nothing), then exactly what
``POST /api/v1/tasks`` or ``POST …/cancel`` does — the same parser (``app.api.validation``), the
same limits (body size, depth, the submit rate and the open-task cap) — or, for a command that
cannot be taken, a ``task.rejected`` event in the outbox naming it and the problem the HTTP request
would have had. Never a silent drop. The message is acked only after that transaction committed; a
database that does not answer leaves it unacked (RabbitMQ redelivers it, Redis keeps it pending
and it is read again).

Consumers: :class:`AmqpCommandConsumer` (kombu, every amqp-channel client's command queue) and
:class:`RedisCommandConsumer` (redis-py, every redis-channel client's command stream, consumer
group ``liaison``; entries a dead consumer left pending are claimed with XAUTOCLAIM). Run by
``flask --app app liaison channel-commands`` (Procfile: ``channel-commands``).

This module is a composition root's (``app``): it uses the API's parser and limits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from kombu import Connection, Message, Queue
from kombu.mixins import ConsumerMixin
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from app.api.validation import parse_submit
from app.errors import ApiError
from app.limits import check_submit_rate, max_open_tasks
from foundation import metrics
from foundation.logging import bind, clear
from models.base import utcnow
from models.client import Client
from service import claims, intake, outbox_rows
from service.lifecycle import AlreadyFinal, request_cancel
from service.vendor_events import first_time
from wire.broker_messages import header_items
from wire.channel_messages import (
    AMQP,
    CANCEL_TASK,
    GROUP,
    REDIS,
    SUBMIT_TASK,
    CommandRefused,
    cancel_fields,
    command_queue,
    command_stream,
    parse_command,
    rejection,
    text_field,
)
from workers.runtime import Liaison

log = logging.getLogger(__name__)
#: A database that does not answer: the command is tried again after this pause.
RETRY_PAUSE_S = 1.0
#: How often the consumers look for clients put on their channel since they started.
REFRESH_S = 10.0


@dataclass(frozen=True)
class Handled:
    outcome: str  # submitted | replayed | cancel_requested | duplicate | rejected
    message_id: str | None
    correlation_id: str | None = None


@dataclass(frozen=True)
class ChannelClient:
    id: int
    name: str


def source(client: str) -> str:
    return f"channel:{client}"


def take(
    ctx: Liaison,
    client: ChannelClient,
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    idempotency_key: str | None = None,
) -> Handled:
    """Take one command (commits). SQLAlchemyError escapes: the caller leaves the message unacked."""
    clear()
    bind(client=client.name, message_id=message_id)
    refused: ApiError | None = None
    if command_type == SUBMIT_TASK:
        # the limiter runs its own short transaction, before ours (as the API does)
        with ctx.db.transaction() as session:
            found = session.get(Client, client.id)
            assert found is not None
            session.expunge(found)
        try:
            check_submit_rate(ctx.limiter, ctx.settings, found)  # every submit counts, as over HTTP
        except ApiError as exc:
            refused = exc
    for attempt in (1, 2):
        try:
            with ctx.db.transaction() as session:
                return _take(ctx, session, client, message_id, command_type, body, idempotency_key, refused)
        except IntegrityError:
            # a concurrent identical command (or submit) won a unique constraint: the retry finds it
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _take(
    ctx: Liaison,
    session: Session,
    ref: ChannelClient,
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    idempotency_key: str | None,
    refused: ApiError | None,
) -> Handled:
    now = utcnow()
    settings = ctx.settings
    client = session.scalars(select(Client).where(Client.id == ref.id)).one()

    def reject(status: int, title: str, errors: list[dict[str, str]] | None, correlation_id: str | None) -> Handled:
        payload = rejection(
            message_id,
            command_type,
            status,
            title,
            errors or [],
            correlation_id=correlation_id,
            occurred_at=now.isoformat(),
        )
        payload.update(message_id=outbox_rows.new_message_id(), client_id=client.id)
        outbox_rows.add_channel_event(session, None, correlation_id, payload, now)
        log.info("channel command %s from %s rejected: %s", message_id, client.name, title)
        return Handled("rejected", message_id, correlation_id)

    try:
        command = parse_command(
            message_id,
            command_type,
            body,
            max_bytes=settings.max_body_bytes,
            max_depth=settings.max_json_depth,
            idempotency_key=idempotency_key,
        )
    except CommandRefused as exc:
        seen_before = (
            message_id is not None
            and len(message_id) <= 200
            and not first_time(session, source(client.name), message_id, str(command_type)[:64], now)
        )
        if seen_before:
            return Handled("duplicate", message_id)
        return reject(exc.status, exc.title, exc.errors, None)
    if not first_time(session, source(client.name), command.message_id, command.type, now):
        return Handled("duplicate", command.message_id)
    correlation_id = command.body.get("correlation_id")
    correlation_id = correlation_id if isinstance(correlation_id, str) else None
    if client.disabled_at is not None:
        return reject(403, "this client is disabled", None, correlation_id)
    if refused is not None:
        return reject(refused.status, str(refused), refused.errors, correlation_id)
    if command.type == CANCEL_TASK:
        try:
            correlation_id, reason = cancel_fields(command.body)
        except CommandRefused as exc:
            return reject(exc.status, exc.title, exc.errors, correlation_id)
        task = intake.find_task(session, client, correlation_id)
        if task is None:
            return reject(404, "no such task", None, correlation_id)
        task = claims.lock_task(session, task.id)
        try:
            with session.begin_nested():
                request_cancel(session, task, reason, now)
        except AlreadyFinal as exc:
            return reject(409, str(exc), None, correlation_id)
        return Handled("cancel_requested", command.message_id, correlation_id)
    try:
        req = parse_submit(
            command.body,
            providers=settings.providers,
            default_provider=settings.default_provider,
            client_callback_url=client.callback_url,
            now=now,
            client_callback_origins=client.callback_origins,
            input_limits=settings.input_limits,
            outbound_allow=settings.outbound_allow,
            client_channel=client.channel,
        )
        result = intake.submit_task(
            session, client, req, command.idempotency_key, now, max_open_tasks=max_open_tasks(settings, client)
        )
    except ApiError as exc:
        return reject(exc.status, str(exc), exc.errors, correlation_id)
    except intake.IdempotencyConflict as exc:
        return reject(409, str(exc), None, correlation_id)
    except intake.OpenTasksCapReached as exc:
        return reject(429, str(exc), None, correlation_id)
    outcome = "submitted" if result.created else "replayed"
    return Handled(outcome, command.message_id, result.task.correlation_id)


def channel_clients(ctx: Liaison, channel: str) -> list[ChannelClient]:
    with ctx.db.transaction() as session:
        rows = session.execute(select(Client.id, Client.name).where(Client.channel == channel).order_by(Client.id))
        return [ChannelClient(id_, name) for id_, name in rows]


def as_bytes(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return str(body).encode("utf-8")


# RabbitMQ -----------------------------------------------------------------------------------------
class AmqpCommandConsumer(ConsumerMixin):
    """Every amqp-channel client's command queue; kombu's mixin reconnects after a broker restart.
    Clients put on the channel later are found every ``refresh_s`` and their queues consumed too."""

    def __init__(
        self,
        ctx: Liaison,
        *,
        sleep: Callable[[float], None] = time.sleep,
        prefetch: int = 16,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.ctx = ctx
        self.clients: dict[int, ChannelClient] = {}
        self.connection = Connection(
            ctx.settings.channel_amqp_url, connect_timeout=ctx.settings.channel_timeout_s, heartbeat=30
        )
        self._sleep = sleep
        self._prefetch = prefetch
        self._refresh_s = refresh_s
        self._refreshed = 0.0
        self._make: Any = None
        self.ready = threading.Event()

    def get_consumers(self, consumer: Any, channel: Any) -> list[Any]:
        """On every (re)connection: a kombu consumer per client known so far."""
        self._make = consumer
        self._refresh(consume=False)
        return [self._consumer(c) for c in self.clients.values()]

    def _consumer(self, client: ChannelClient) -> Any:
        name = command_queue(self.ctx.settings.channel_prefix, client.name)
        return self._make(
            queues=[Queue(name, exchange="", routing_key=name, durable=True)],
            on_message=self._handler(client),
            prefetch_count=self._prefetch,
            accept=None,
        )

    def _refresh(self, *, consume: bool) -> None:
        self._refreshed = time.monotonic()
        try:
            found = channel_clients(self.ctx, AMQP)
        except SQLAlchemyError as exc:
            log.warning("amqp channel: clients not re-read: %s", type(exc).__name__)
            return
        for client in found:
            if client.id not in self.clients:
                self.clients[client.id] = client
                if consume:
                    self._consumer(client).consume()

    def on_iteration(self) -> None:
        if self._make is not None and time.monotonic() - self._refreshed >= self._refresh_s:
            self._refresh(consume=True)

    def on_consume_ready(self, connection: Any, channel: Any, consumers: Any, **kwargs: Any) -> None:
        self.ready.set()

    def _handler(self, client: ChannelClient) -> Callable[[Message], None]:
        def on_message(message: Message) -> None:
            properties = message.properties or {}
            headers = header_items(message.headers)
            try:
                handled = take(
                    self.ctx,
                    client,
                    text_field(properties, "message_id"),
                    text_field(properties, "type"),
                    as_bytes(message.body),
                    headers.get("idempotency-key"),
                )
            except SQLAlchemyError as exc:
                log.warning("channel command from %s not stored, put back: %s", client.name, type(exc).__name__)
                self._sleep(RETRY_PAUSE_S)
                message.requeue()
                return
            log.info("channel command from %s: %s (%s)", client.name, handled.outcome, handled.message_id)
            metrics.channel_command(AMQP, handled.outcome)
            message.ack()

        return on_message


# Redis Streams ------------------------------------------------------------------------------------
class RedisCommandConsumer:
    """Every redis-channel client's command stream, read in the consumer group ``liaison``.

    An entry is acked (XACK) and deleted (XDEL) after its transaction committed. Entries another consumer read and
    never acked (it died) are claimed once idle ``LIAISON_CHANNEL_CLAIM_IDLE_S`` (XAUTOCLAIM) and
    taken here; the inbox makes taking one twice harmless. Clients put on the channel later are
    found every ``refresh_s``.
    """

    def __init__(
        self,
        ctx: Liaison,
        *,
        consumer: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        block_ms: int = 1000,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.ctx = ctx
        settings = ctx.settings
        self.redis = redis.Redis.from_url(
            settings.channel_redis_url,
            socket_timeout=settings.channel_timeout_s + block_ms / 1000,
            socket_connect_timeout=settings.channel_timeout_s,
        )
        self.streams: dict[str, ChannelClient] = {}
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.should_stop = False
        self.ready = threading.Event()
        self._sleep = sleep
        self._block_ms = block_ms
        self._claimed_at = 0.0
        self._retry_pending = False
        self._refresh_s = refresh_s
        self._refreshed = 0.0

    def _refresh(self) -> None:
        """New clients on the channel: their streams and groups (on PostgreSQL a failed read is
        simply tried at the next refresh)."""
        self._refreshed = time.monotonic()
        try:
            found = channel_clients(self.ctx, REDIS)
        except SQLAlchemyError as exc:
            log.warning("redis channel: clients not re-read: %s", type(exc).__name__)
            return
        prefix = self.ctx.settings.channel_prefix
        for client in found:
            stream = command_stream(prefix, client.name)
            if stream not in self.streams:
                self._ensure_group(stream)
                self.streams[stream] = client

    def _ensure_group(self, stream: str) -> None:
        try:
            self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _ensure_groups(self) -> None:
        for stream in self.streams:
            self._ensure_group(stream)

    def run(self) -> None:
        groups_ok = False
        while not self.should_stop:
            try:
                if time.monotonic() - self._refreshed >= self._refresh_s:
                    self._refresh()
                if not groups_ok:  # again after a reconnect: a restarted Redis may have lost them
                    self._ensure_groups()
                    groups_ok = True
                    self._drain_own_pending()
                    self.ready.set()
                if self._retry_pending:
                    self._retry_pending = False
                    self._drain_own_pending()
                self._claim_abandoned()
                if not self.streams:
                    self._sleep(self._block_ms / 1000)
                    continue
                read: Any = self.redis.xreadgroup(
                    GROUP, self.consumer, dict.fromkeys(self.streams, ">"), count=16, block=self._block_ms
                )
                for stream, entries in read or []:
                    self._take_entries(stream, entries)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis channel: %s; reconnecting", type(exc).__name__)
                groups_ok = False
                self._sleep(RETRY_PAUSE_S)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                groups_ok = False  # a restarted Redis without the groups: make them again

    def _drain_own_pending(self) -> None:
        """Entries this consumer name read before and never acked (a database that did not answer)."""
        if not self.streams:
            return
        read: Any = self.redis.xreadgroup(GROUP, self.consumer, dict.fromkeys(self.streams, "0"), count=100)
        for stream, entries in read or []:
            self._take_entries(stream, entries)

    def _claim_abandoned(self) -> None:
        idle_s = self.ctx.settings.channel_claim_idle_s
        if time.monotonic() - self._claimed_at < min(idle_s / 2, 5.0):
            return
        self._claimed_at = time.monotonic()
        for stream in self.streams:
            claimed: Any = self.redis.xautoclaim(stream, GROUP, self.consumer, int(idle_s * 1000), "0-0", count=100)
            self._take_entries(stream, claimed[1])

    def _take_entries(self, stream: Any, entries: list[Any]) -> None:
        name = stream.decode() if isinstance(stream, bytes) else str(stream)
        client = self.streams[name]
        for entry_id, fields in entries:
            if fields is None:  # deleted meanwhile (XAUTOCLAIM may name such ids)
                self._done(name, entry_id)
                continue
            try:
                handled = take(
                    self.ctx,
                    client,
                    text_field(fields, "message_id"),
                    text_field(fields, "type"),
                    as_bytes(fields.get(b"body", fields.get("body", b""))),
                    text_field(fields, "idempotency_key"),
                )
            except SQLAlchemyError as exc:
                # Left pending: read again by _drain_own_pending after the pause.
                log.warning("channel command from %s not stored, left pending: %s", client.name, type(exc).__name__)
                self._sleep(RETRY_PAUSE_S)
                self._retry_pending = True
                return
            log.info("channel command from %s: %s (%s)", client.name, handled.outcome, handled.message_id)
            metrics.channel_command(REDIS, handled.outcome)
            self._done(name, entry_id)

    def _done(self, stream: str, entry_id: Any) -> None:
        """Acked, then deleted: the command stream is Liaison's alone, so a taken command has no
        further reader, and the stream stays as short as what is still to be taken."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.xack(stream, GROUP, entry_id)
        pipe.xdel(stream, entry_id)
        pipe.execute()


__all__ = ["AmqpCommandConsumer", "ChannelClient", "Handled", "RedisCommandConsumer", "channel_clients", "take"]
