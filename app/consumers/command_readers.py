"""The readers of domain apps' command channels: every amqp-channel client's command queue
(:class:`AmqpCommandConsumer`, kombu) and every redis-channel client's command stream
(:class:`RedisCommandConsumer`, redis-py, consumer group ``liaison``; entries a dead consumer left
pending are claimed with XAUTOCLAIM). Each command is taken by ``app.consumers.domain_commands.take``
and acked only after its transaction committed. Run by ``flask --app app liaison channel-commands``
(Procfile: ``channel-commands``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from kombu import Connection, Message, Queue
from kombu.mixins import ConsumerMixin
from sqlalchemy.exc import SQLAlchemyError

from app.consumers.domain_commands import REFRESH_S, RETRY_PAUSE_S, ChannelClient, as_bytes, channel_clients, take
from core.queue_types import queue_arguments
from foundation import metrics
from runtime.context import Liaison
from wire.broker_messages import header_items
from wire.channel_messages import (
    AMQP,
    GROUP,
    REDIS,
    command_queue,
    command_stream,
    text_field,
)

log = logging.getLogger(__name__)


# RabbitMQ -----------------------------------------------------------------------------------------
def command_queue_of(prefix: str, client: str, queue_type: str) -> Queue:
    """A client's command queue as we declare it (LIAISON_RABBITMQ_QUEUE_TYPE). No delivery limit:
    the consumer puts a command back on purpose while the database is away."""
    name = command_queue(prefix, client)
    return Queue(name, exchange="", routing_key=name, durable=True, queue_arguments=queue_arguments(queue_type))


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
        settings = self.ctx.settings
        return self._make(
            queues=[command_queue_of(settings.channel_prefix, client.name, settings.rabbitmq_queue_type)],
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
                    headers.get("traceparent"),
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
                    text_field(fields, "traceparent"),
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


__all__ = ["AmqpCommandConsumer", "RedisCommandConsumer"]
