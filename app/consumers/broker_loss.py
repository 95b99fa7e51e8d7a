"""A Celery consumer that lives through the loss of its broker (issue 41.1): it reconnects, and on
Redis it puts back at once the messages it held when the connection broke.

Two things, with ``app.redis_broker`` (which stops the cleanup of a dead Redis connection from
raising ``AttributeError`` out of the worker):

- **What the broker held for us.** RabbitMQ requeues a dropped connection's unacked messages itself.
  Redis keeps them in its unacked hash, and kombu restores them when the channel closes, which on a
  dead connection fails (the broker is down); after that, nothing restores them until the
  visibility timeout (12 h) or the outbox lease (30 min) runs out. So the consumer remembers their
  delivery tags when the connection breaks, and :class:`RestoreHeld` (a consumer bootstep, after
  the task consumer is back) restores them through the new connection, first in their queues.
  A message a thread was still running is thereby run twice; our tasks claim their outbox row
  first, so the copy finds it done (the same holds for every redelivery).
- **Bootsteps we do not use.** Gossip (worker-to-worker events: clock sync, leader election) and
  Mingle (revoked ids and clocks asked of the other workers at start) serve features Liaison does
  not use (it never revokes a task, nor elects). Each is a consumer of its own that Celery tears
  down and rebuilds at every reconnect (kombu issue #582, "Error on restarting Gossip", is that
  teardown failing); off, as ``--without-gossip --without-mingle`` would set them, for every way
  a worker is started. Heartbeats stay: Flower's online/offline comes from them.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from celery import bootsteps
from celery.worker.consumer import Consumer
from kombu.transport import redis

log = logging.getLogger(__name__)

#: the worker options that turn off the consumer bootsteps Liaison does not need
UNUSED_STEPS = {"without_gossip": True, "without_mingle": True}


def unacked_tags(channel: Any) -> set[str]:
    """Delivery tags of the messages a Redis channel holds unacked (none for other transports:
    RabbitMQ requeues them itself)."""
    if not isinstance(channel, redis.Channel):
        return set()
    qos = channel.__dict__.get("_qos")  # only if it ever delivered: ``channel.qos`` would create one
    if qos is None:
        return set()
    return set(qos._delivered) - set(qos._dirty or ())


class BrokerLossConsumer(Consumer):
    def __init__(self, *args: Any, worker_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, worker_options={**(worker_options or {}), **UNUSED_STEPS}, **kwargs)
        #: delivery tags held unacked when the connection broke, restored after the reconnect
        self.held_unacked: set[str] = set()

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        task_consumer = getattr(self, "task_consumer", None)
        if task_consumer is not None:
            self.held_unacked |= unacked_tags(task_consumer.channel)
        super().on_connection_error_after_connected(exc)


class RestoreHeld(bootsteps.StartStopStep):
    """Consumer bootstep: once the task consumer is connected again, put the messages held at the
    connection loss back at the head of their queues. A broker error meanwhile ends this start like
    any other step's (Celery reconnects and starts the steps again); what was not restored yet is
    kept for then. A tag already acked or restored is a no-op (kombu's ``restore_by_tag``)."""

    requires: ClassVar[set[str]] = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c: Any) -> None:
        held: set[str] = getattr(c, "held_unacked", set())
        if not held:
            return
        qos = c.task_consumer.channel.qos
        count = len(held)
        for tag in sorted(held):
            qos.restore_by_tag(tag, leftmost=True)
            held.discard(tag)
        log.warning("restored %d message(s) held unacked when the broker connection was lost", count)
