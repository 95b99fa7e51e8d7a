"""Events out to domain apps' broker channels: RabbitMQ (kombu) and Redis Streams (redis-py).

One event is one signed message, sent only as far as the broker's confirmation: on RabbitMQ a
publisher confirm (the channel in confirm mode) with ``mandatory`` set, so an event no queue is
bound for comes back as an error instead of being dropped by the exchange; on Redis, XADD's reply
(the entry id). Anything short of that raises ``TransientError`` and the outbox row is retried by
the channel task's policy, then dead-lettered: nothing is marked done that the broker did not take.

A retry after a lost confirm may publish the event twice; the consumer deduplicates on its
``message_id`` (the ``webhook-id`` header), as for HTTP callbacks (docs/design.md §4).

Connections are kept per process and thrown away on any error: a broker restart costs one failed
attempt, retried.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import kombu.exceptions
import redis
from amqp.exceptions import AMQPError, MessageNacked  # type: ignore[import-untyped]  # kombu's AMQP client
from kombu import Connection, Exchange, Producer

from core.errors import TransientError
from foundation import tracing
from foundation.settings import Settings
from webhooks.signing import sign
from wire.channel_messages import AMQP, REDIS, ChannelEvent, events_exchange, events_stream, routing_key
from workers.delivery import encode

#: Anything the brokers' clients raise: a vhost refusing us while RabbitMQ restarts is an AMQPError
#: (530 NOT_ALLOWED) that kombu does not wrap.
BROKER_ERRORS = (OSError, kombu.exceptions.KombuError, AMQPError, redis.RedisError)


def signed(event: ChannelEvent, now_ts: float) -> tuple[bytes, dict[str, str]]:
    """The bytes and Standard Webhooks headers an HTTP callback of this event would have, and the
    task's ``traceparent`` as an HTTP callback carries it."""
    body = encode(event.body)
    return body, {**sign(event.secrets, event.message_id, int(now_ts), body).as_dict(), **tracing.message_headers()}


class ChannelPublisher:
    """Per process: one RabbitMQ connection and one Redis client, made on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._amqp: Connection | None = None
        self._redis: redis.Redis | None = None

    def publish(self, event: ChannelEvent, now_ts: float) -> str:
        """Send one event; returns where it went (routing key, or the stream entry id)."""
        body, headers = signed(event, now_ts)
        if event.channel == AMQP:
            return self._publish_amqp(event, body, headers)
        if event.channel == REDIS:
            return self._xadd(event, body, headers)
        raise TransientError(f"unknown channel {event.channel!r}")

    # RabbitMQ -----------------------------------------------------------------------------------
    def _amqp_connection(self) -> Connection:
        if self._amqp is None:
            if not self.settings.channel_amqp_url:
                raise TransientError("LIAISON_CHANNEL_AMQP_URL is not set: no RabbitMQ for amqp channels")
            self._amqp = Connection(
                self.settings.channel_amqp_url,
                connect_timeout=self.settings.channel_timeout_s,
                heartbeat=0,
                transport_options={"confirm_publish": True},
            )
        return self._amqp

    def _drop_amqp(self) -> None:
        if self._amqp is not None:
            with contextlib.suppress(*BROKER_ERRORS):  # already broken: it is being thrown away
                self._amqp.release()
            self._amqp = None

    def _publish_amqp(self, event: ChannelEvent, body: bytes, headers: dict[str, str]) -> str:
        key = routing_key(event.client, event.type)
        exchange = Exchange(events_exchange(self.settings.channel_prefix), type="topic", durable=True)
        with self._lock:
            try:
                conn = self._amqp_connection()
                conn.ensure_connection(max_retries=0)
                channel = conn.default_channel
                exchange(channel).declare()
                Producer(channel).publish(
                    body,
                    exchange=exchange,
                    routing_key=key,
                    mandatory=True,  # no queue bound for it: an error here, not a silent drop
                    content_type="application/json",
                    content_encoding="utf-8",
                    delivery_mode=2,
                    headers=headers,
                    type=event.type,
                    message_id=event.message_id,
                    correlation_id=event.body.get("correlation_id"),
                    retry=False,  # the outbox task's policy retries
                    confirm_timeout=self.settings.channel_timeout_s,
                )
            except MessageNacked:
                self._drop_amqp()
                raise TransientError(f"RabbitMQ refused the event {key} (nack)") from None
            except kombu.exceptions.ChannelError as exc:  # 312 NO_ROUTE (mandatory), 404 …
                self._drop_amqp()
                raise TransientError(f"event {key} not routed: {exc.reply_text or exc}") from None
            except BROKER_ERRORS as exc:
                self._drop_amqp()
                raise TransientError(f"event {key} not confirmed: {type(exc).__name__}") from None
        return key

    # Redis Streams ------------------------------------------------------------------------------
    def _redis_client(self) -> redis.Redis:
        if self._redis is None:
            if not self.settings.channel_redis_url:
                raise TransientError("LIAISON_CHANNEL_REDIS_URL is not set: no Redis for redis channels")
            timeout = self.settings.channel_timeout_s
            self._redis = redis.Redis.from_url(
                self.settings.channel_redis_url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        return self._redis

    def _xadd(self, event: ChannelEvent, body: bytes, headers: dict[str, str]) -> str:
        stream = events_stream(self.settings.channel_prefix, event.client)
        fields: dict[Any, Any] = {"message_id": event.message_id, "type": event.type, "body": body, **headers}
        try:
            entry = self._redis_client().xadd(
                stream, fields, maxlen=self.settings.channel_events_maxlen, approximate=True
            )
        except BROKER_ERRORS as exc:
            raise TransientError(f"event not added to {stream}: {type(exc).__name__}") from None
        return f"{stream} {entry.decode() if isinstance(entry, bytes) else entry}"
