"""The consumer of ``amqp`` vendors' events: each provider's reply queue, read like a webhook.

A message goes through what ``POST /webhooks/<provider>`` does, in the same order: bounded size,
the Standard Webhooks signature (the headers travel as message headers), the ``webhook-id`` as the
MessageId, the bounded event body, then ``service.vendor_events.receive_event`` (dedup on
ProcessedMessage, late binding of early events, the state machine) in one transaction. The message
is acked only after that transaction committed; a database that does not answer puts it back
(after a pause) for the next try. A message that fails verification or parsing is rejected
without requeue: RabbitMQ dead-letters it to ``<reply queue>.dead``, where it stays for an
operator (docs/runbook.md), never dropped.

The signature's timestamp is checked against half the processed-message retention, not the
webhook tolerance: a queue holds events while this consumer is down, and the inbox (which keeps
ids that long) is what stops a replay (design departure 29).

Run by ``flask --app app liaison vendor-events`` (Procfile: ``vendor-events``), one thread per
``amqp`` provider.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kombu import Connection, Message
from kombu.mixins import ConsumerMixin
from sqlalchemy.exc import SQLAlchemyError

from foundation import metrics
from foundation.logging import bind, clear
from foundation.provider_settings import ProviderSettings
from models.base import utcnow
from service import vendor_events
from webhooks.events import EventTooLarge, MalformedEvent, parse_event
from webhooks.signing import SignatureError, verify
from wire.broker_messages import header_items
from workers.providers.amqp import reply_queues
from workers.runtime import Liaison

log = logging.getLogger(__name__)
#: A database that does not answer: the message goes back after this pause, not in a hot loop.
RETRY_PAUSE_S = 1.0


class Refused(Exception):
    """A vendor message that cannot be applied: dead-lettered, counted under ``reason``."""

    def __init__(self, reason: metrics.WebhookRejection, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Received:
    status: str  # applied | ignored | duplicate | orphan
    message_id: str


def event_tolerance_s(ctx: Liaison) -> int:
    """How old a queued event's signature may be: half the inbox's retention (see the module doc)."""
    return max(ctx.settings.webhook_tolerance_s, ctx.settings.processed_retention_s // 2)


def receive(ctx: Liaison, ps: ProviderSettings, headers: dict[str, str], body: bytes, now_s: float) -> Received:
    """Verify, parse and apply one vendor message (commits); Refused when it is not acceptable."""
    if len(body) > ctx.settings.max_body_bytes:
        raise Refused("too_large", f"{len(body)} bytes, at most {ctx.settings.max_body_bytes}")
    try:
        message_id = verify(ps.webhook_secrets, headers, body, now_s, event_tolerance_s(ctx))
    except SignatureError as exc:
        raise Refused("stale" if exc.reason == "stale" else "signature", f"signature rejected: {exc.reason}") from None
    if len(message_id) > 200 or "\x00" in message_id:
        raise Refused("malformed", "webhook-id must be at most 200 characters, without NUL")
    bind(message_id=message_id)
    try:
        event = parse_event(body, ctx.settings.outcome_limits)
    except EventTooLarge as exc:
        raise Refused("too_large", str(exc)) from None
    except MalformedEvent as exc:
        raise Refused("malformed", str(exc)) from None
    with ctx.db.transaction() as session:
        result = vendor_events.receive_event(session, ps.name, message_id, event, utcnow())
    if result.status == "duplicate":
        metrics.webhook_rejected(ps.name, "duplicate")
    return Received(result.status, message_id)


class VendorEventConsumer(ConsumerMixin):
    """One provider's reply queue; kombu's mixin reconnects after a broker restart."""

    def __init__(
        self, ctx: Liaison, ps: ProviderSettings, *, sleep: Callable[[float], None] = time.sleep, prefetch: int = 16
    ) -> None:
        self.ctx, self.ps = ctx, ps
        self.connection = Connection(ps.amqp_url, connect_timeout=ps.connect_timeout_s, heartbeat=30)
        self._sleep = sleep
        self._prefetch = prefetch
        self.ready = threading.Event()  # set once the queue is declared and consumed (tests wait on it)

    def get_consumers(self, consumer: Any, channel: Any) -> list[Any]:
        live, dead = reply_queues(self.ps.reply_queue)
        dead(channel).declare()
        return [consumer(queues=[live], on_message=self.on_message, prefetch_count=self._prefetch)]

    def on_consume_ready(self, connection: Any, channel: Any, consumers: Any, **kwargs: Any) -> None:
        self.ready.set()

    def on_message(self, message: Message) -> None:
        name = self.ps.name
        clear()  # one message's context, like one request's
        bind(provider=name)
        metrics.webhook_received(name)
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode("utf-8")
        try:
            received = receive(self.ctx, self.ps, header_items(message.headers), body, time.time())
        except Refused as exc:
            metrics.webhook_rejected(name, exc.reason)
            log.warning("vendor event from %s dead-lettered (%s): %s", name, exc.reason, exc)
            message.reject(requeue=False)
            return
        except SQLAlchemyError as exc:
            log.warning("vendor event from %s not stored, put back: %s", name, type(exc).__name__)
            self._sleep(RETRY_PAUSE_S)
            message.requeue()
            return
        log.info("vendor event from %s: %s (%s)", name, received.status, received.message_id)
        message.ack()


def amqp_providers(ctx: Liaison) -> list[ProviderSettings]:
    return [ps for ps in ctx.settings.providers.values() if ps.kind == "amqp"]
