"""Broker mode: the simulator as an ``amqp`` vendor (docs/design.md §5, ``wire.broker_messages``).

With ``SIMULATOR_AMQP_URL`` set, ``create_app`` also starts a thread that consumes the command
queue (``SIMULATOR_AMQP_COMMAND_QUEUE``, default ``sim.commands``; declared durable):

* ``job.submit`` creates a job once per Idempotency-Key, named by its reference, with the same
  behaviour knobs as ``POST /jobs`` (``input.simulate``); its events (accepted, completed: delays,
  drop, duplicate, reorder as over HTTP) are published to the command's ``reply_to`` queue, signed
  with ``SIMULATOR_WEBHOOK_SECRET`` in the message headers. ``reject`` completes it as failed;
  the HTTP-only knobs (``transient_failures``, ``slow_s``, ``down``) do not apply here.
* ``job.cancel`` cancels an active job (its ``job.completed`` with ``canceled`` follows);
* ``job.status`` is answered on its ``reply_to`` with its ``correlation_id``, signed likewise.

Each command is acked once handled; one that cannot be read is logged and acked (a vendor has no
dead-letter duty towards us). The HTTP control API (``/_sim/jobs``, ``/_sim/config``) sees these
jobs too: one store.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from kombu import Connection, Message, Queue
from kombu.mixins import ConsumerMixin

from simulator.amqp_publish import BrokerError, publish_signed
from simulator.behaviour import BehaviourError, resolve_behaviour
from simulator.dispatch import AMQP_PREFIX
from simulator.engine import Engine
from simulator.settings import Settings
from simulator.store import Store, new_job
from wire.broker_messages import (
    CANCEL,
    IDEMPOTENCY_KEY,
    STATUS,
    SUBMIT,
    MalformedCommand,
    header_items,
    parse_command,
    status_reply,
)

log = logging.getLogger(__name__)


class BrokerVendor(ConsumerMixin):
    def __init__(self, settings: Settings, store: Store, engine: Engine) -> None:
        self.settings, self.store, self.engine = settings, store, engine
        self.connection = Connection(settings.amqp_url, connect_timeout=5, heartbeat=30)
        name = settings.amqp_command_queue
        self.queue = Queue(name, exchange="", routing_key=name, durable=True)
        self.ready = threading.Event()
        self.handled: dict[str, int] = {}  # commands by type, for tests and /_sim/jobs readers

    def get_consumers(self, consumer: Any, channel: Any) -> list[Any]:
        return [consumer(queues=[self.queue], on_message=self.on_message, prefetch_count=8)]

    def on_consume_ready(self, connection: Any, channel: Any, consumers: Any, **kwargs: Any) -> None:
        self.ready.set()

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="sim-broker", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop consuming and wait (kombu looks at ``should_stop`` about once a second), so the
        command queue can be deleted without cancelling a live consumer."""
        self.should_stop = True
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(timeout_s)

    def on_message(self, message: Message) -> None:
        kind = str(message.properties.get("type") or "")
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode("utf-8")
        try:
            data = parse_command(kind, body)
            self.handled[kind] = self.handled.get(kind, 0) + 1
            if kind == SUBMIT:
                self._submit(data, header_items(message.headers), str(message.properties.get("reply_to") or ""))
            elif kind == CANCEL:
                self.engine.finish(data["job_id"], "canceled")
            elif kind == STATUS:
                self._status(data["job_id"], message.properties)
        except (MalformedCommand, BehaviourError) as exc:
            log.warning("simulator: %s command refused: %s", kind or "untyped", exc)
        except BrokerError as exc:  # a status reply not confirmed: the caller times out and asks again
            log.warning("simulator: reply not sent: %s", exc)
        message.ack()

    def _submit(self, data: dict[str, Any], headers: dict[str, str], reply_to: str) -> None:
        key = headers.get(IDEMPOTENCY_KEY.lower()) or data["reference"]
        if not reply_to:
            raise MalformedCommand("job.submit needs reply_to")
        behaviour = resolve_behaviour(self.store.config, data["input"])
        self.store.count_attempt(key)
        reference = data["reference"]
        job, created = self.store.add_or_get(
            new_job(
                key,
                reference,
                data["input"],
                AMQP_PREFIX + reply_to,
                behaviour,
                job_id=reference,
                traceparent=headers.get("traceparent"),
            )
        )
        if not created:
            return
        if behaviour.reject:
            self.engine.finish(job.job_id, "failed", {"error": "simulated rejection (reject)"})
        else:
            self.engine.start(job)

    def _status(self, job_id: str, properties: dict[str, Any]) -> None:
        reply_to = properties.get("reply_to")
        if not reply_to:
            raise MalformedCommand("job.status needs reply_to")
        job = self.store.get(job_id)
        body = status_reply(job_id, job.status if job else None, job.outcome if job else None)
        publish_signed(
            self.settings,
            str(reply_to),
            body,
            message_id="msg_" + uuid.uuid4().hex,
            type_="job.status.reply",
            correlation_id=str(properties.get("correlation_id") or ""),
        )
