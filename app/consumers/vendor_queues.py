"""The consumer of ``amqp`` vendors' events: each provider's reply queue, read like a webhook.

A message goes through the one way in that ``POST /webhooks/<provider>`` takes (``service.ingress``:
bounded size, the Standard Webhooks signature (the headers travel as message headers), the
``webhook-id`` as the MessageId, the bounded event body, then dedup and apply) in one transaction.
The message is acked only after that transaction committed; a database that does not answer puts it back
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
from typing import Any

from kombu import Connection, Message
from kombu.mixins import ConsumerMixin
from sqlalchemy.exc import SQLAlchemyError

from foundation.logging import bind, clear
from foundation.provider_settings import ProviderSettings
from runtime.context import Liaison
from service import ingress
from service.ingress import Received, Refused
from wire.broker_messages import header_items
from workers.providers.amqp import reply_queues

log = logging.getLogger(__name__)
#: A database that does not answer: the message goes back after this pause, not in a hot loop.
RETRY_PAUSE_S = 1.0


def event_tolerance_s(ctx: Liaison) -> int:
    """How old a queued event's signature may be: half the inbox's retention (see the module doc)."""
    return max(ctx.settings.webhook_tolerance_s, ctx.settings.processed_retention_s // 2)


def receive(ctx: Liaison, ps: ProviderSettings, headers: dict[str, str], body: bytes, now_s: float) -> Received:
    """One vendor message through the one way in (``service.ingress``), committed; Refused when it
    is not acceptable."""
    with ctx.db.transaction() as session:
        return ingress.receive(
            session, ctx.settings, ps, headers, body, now_s=now_s, tolerance_s=event_tolerance_s(ctx)
        )


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
        live, dead = reply_queues(self.ps.reply_queue, self.ctx.settings.rabbitmq_queue_type)
        dead(channel).declare()
        return [consumer(queues=[live], on_message=self.on_message, prefetch_count=self._prefetch)]

    def on_consume_ready(self, connection: Any, channel: Any, consumers: Any, **kwargs: Any) -> None:
        self.ready.set()

    def on_message(self, message: Message) -> None:
        name = self.ps.name
        clear()  # one message's context, like one request's
        bind(provider=name)
        ingress.arrived(name)
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode("utf-8")
        try:
            received = receive(self.ctx, self.ps, header_items(message.headers), body, time.time())
        except Refused as exc:  # counted by ingress
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
