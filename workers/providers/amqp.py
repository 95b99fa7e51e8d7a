"""The ``amqp`` provider: commands to a vendor's RabbitMQ queue, its events on our reply queue.

Submit and cancel are published to the vendor's command queue (``LIAISON_PROVIDER_<NAME>_COMMAND_QUEUE``)
with ``reply_to`` = our event queue, and count as sent only once RabbitMQ confirmed them
(publisher confirms, ``mandatory`` so a missing queue is an error, not a silent drop). Status is
an RPC: a command with ``reply_to`` = a queue of this one call and a fresh ``correlation_id``,
answered within ``CALL_DEADLINE_S``, the answer signed like a webhook. The events themselves are
consumed by ``app.consumers.vendor_queues``. Message shapes: ``wire.broker_messages``.

Failures map onto ``core.errors`` so the submission's retry policy works unchanged: nothing was
sent (no connection, a nack, no such queue) is transient; a connection lost or a confirm not come
after the command went out is uncertain for a submit (the submission asks ``find`` first) and
transient for a cancel (cancelling twice is harmless); a reply that breaks the contract is
permanent (the vendor's fault).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import kombu.exceptions
from amqp.exceptions import MessageNacked  # type: ignore[import-untyped]  # kombu's AMQP client
from kombu import Connection, Consumer, Message, Producer, Queue

from core.classify import Failure
from core.errors import PermanentError, TransientError, UncertainError
from core.queue_types import CLASSIC, queue_arguments
from foundation import tracing
from foundation.metrics import timed_provider_call
from foundation.provider_settings import ProviderSettings
from runtime.provider import JobSnapshot, SubmitJob
from webhooks.signing import SignatureError, verify
from wire.bounded_json import JsonLimits
from wire.broker_messages import (
    CONTENT_TYPE,
    Command,
    MalformedReply,
    cancel_command,
    header_items,
    parse_status_reply,
    status_command,
    submit_command,
)

#: Broker errors that mean the command did not reach RabbitMQ (or its fate is unknown, after sending).
BROKER_ERRORS = (
    OSError,
    kombu.exceptions.KombuError,
    kombu.exceptions.ConnectionError,
    kombu.exceptions.ChannelError,
)
NOT_FOUND = 404
#: Rejected vendor messages land on ``<reply queue>.dead`` (RabbitMQ dead-lettering, default exchange).
DEAD_SUFFIX = ".dead"


def reply_queues(reply_queue: str, queue_type: str = CLASSIC) -> tuple[Queue, Queue]:
    """Our event queue and its dead-letter queue, declared alike by the adapter (before it names
    the queue as reply-to) and by the consumer. A message the consumer rejects goes to the dead one.
    No delivery limit: the consumer puts an event back on purpose while the database is away."""
    dead = Queue(
        reply_queue + DEAD_SUFFIX,
        exchange="",
        routing_key=reply_queue + DEAD_SUFFIX,
        durable=True,
        queue_arguments=queue_arguments(queue_type),
    )
    live = Queue(
        reply_queue,
        exchange="",
        routing_key=reply_queue,
        durable=True,
        queue_arguments=queue_arguments(
            queue_type, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead.name}
        ),
    )
    return live, dead


def connect(url: str, timeout_s: float) -> Connection:
    """A connection with publisher confirms on; opened (or failed) here, within ``timeout_s``."""
    conn = Connection(url, connect_timeout=timeout_s, heartbeat=0, transport_options={"confirm_publish": True})
    try:
        conn.ensure_connection(max_retries=0)  # one try: the task's retry policy decides the next
    except BROKER_ERRORS as exc:
        conn.release()
        raise TransientError(f"broker not reachable: {type(exc).__name__}") from None
    return conn


class AmqpProvider:
    def __init__(
        self,
        settings: ProviderSettings,
        outcome_limits: JsonLimits | None = None,
        max_response_bytes: int = 1024 * 1024,
        tolerance_s: int = 300,
        queue_type: str = CLASSIC,
    ) -> None:
        self.name = settings.name
        self.queue_type = queue_type  # LIAISON_RABBITMQ_QUEUE_TYPE: the reply queues' type
        self.settings = settings
        self.outcome_limits = outcome_limits or JsonLimits()
        self.max_response_bytes = max_response_bytes
        self.tolerance_s = tolerance_s

    # commands -----------------------------------------------------------------------------------
    def _publish(self, conn: Connection, command: Command, reply_to: str, *, expiration: float | None = None) -> None:
        """Publish and wait for the broker's confirm. Raises BrokerRefused when RabbitMQ said no
        (nothing queued), a BROKER_ERRORS one when the answer never came."""
        channel = conn.channel()
        try:
            Producer(channel).publish(
                command.body,
                exchange="",
                routing_key=self.settings.command_queue,
                mandatory=True,  # no such queue: returned, and an error here, not dropped by the broker
                content_type=CONTENT_TYPE,
                content_encoding="utf-8",
                delivery_mode=2,  # persistent: survives a broker restart with the durable queue
                headers={**command.headers, **tracing.message_headers()},  # the vendor continues the trace
                type=command.type,
                message_id=command.message_id,
                correlation_id=command.correlation_id,
                reply_to=reply_to,
                expiration=expiration,
                retry=False,  # the task's retry policy decides, not kombu
                confirm_timeout=self.settings.call_deadline_s,
            )
        except MessageNacked:
            raise TransientError(f"{self.name}: broker refused the {command.type} command (nack)") from None
        except kombu.exceptions.ChannelError as exc:  # 312 NO_ROUTE from the mandatory flag, 404, …
            raise TransientError(f"{self.name}: {command.type} not queued: {exc.reply_text or exc}") from None
        finally:
            if channel.is_open:
                channel.close()

    def _send(self, command: Command, *, uncertain_after_send: bool) -> None:
        conn = connect(self.settings.amqp_url, self.settings.connect_timeout_s)
        try:
            with conn:
                live, dead = reply_queues(self.settings.reply_queue, self.queue_type)
                try:
                    dead(conn.default_channel).declare()
                    live(conn.default_channel).declare()
                except BROKER_ERRORS as exc:
                    raise TransientError(f"{self.name}: reply queue not declared: {type(exc).__name__}") from None
                try:
                    self._publish(conn, command, live.name)
                except (TransientError, PermanentError):
                    raise
                except BROKER_ERRORS as exc:  # TimeoutError (no confirm in time) is an OSError
                    what = f"{self.name}: {command.type} sent, no confirm ({type(exc).__name__})"
                    raise (UncertainError(what) if uncertain_after_send else TransientError(what)) from None
        except BROKER_ERRORS as exc:  # closing a broken connection
            raise TransientError(f"{self.name}: broker connection failed: {type(exc).__name__}") from None

    def submit(self, job: SubmitJob) -> str:
        """Confirmed by the broker: the job is the vendor's, named by our reference."""
        with timed_provider_call(self.name, "submit"):
            self._send(submit_command(job.reference, job.input, uuid.uuid4().hex), uncertain_after_send=True)
        return job.reference

    def cancel(self, job_id: str) -> None:
        with timed_provider_call(self.name, "cancel"):
            self._send(cancel_command(job_id, uuid.uuid4().hex), uncertain_after_send=False)

    # status over RPC ----------------------------------------------------------------------------
    def status(self, job_id: str) -> JobSnapshot:
        with timed_provider_call(self.name, "status"):
            reply = self._status(job_id)
        if not reply.found:
            raise PermanentError(f"{self.name}: no job {job_id}", status=NOT_FOUND)
        return JobSnapshot(reply.job_id, reply.status, reply.outcome)

    def find(self, reference: str) -> str | None:
        """The job is named by the reference: it exists if the vendor knows it."""
        with timed_provider_call(self.name, "find"):
            reply = self._status(reference)
        return reply.job_id if reply.found else None

    def _refused(self, reason: str) -> PermanentError:
        return PermanentError(f"{self.name}: {reason}", failure=Failure.BAD_RESPONSE)

    def _status(self, job_id: str) -> Any:
        deadline_s = self.settings.call_deadline_s
        correlation_id = uuid.uuid4().hex
        answer: list[Message] = []

        def on_message(message: Message) -> None:
            if message.properties.get("correlation_id") == correlation_id:
                answer.append(message)

        conn = connect(self.settings.amqp_url, self.settings.connect_timeout_s)
        try:
            with conn:
                # A queue of this call only: gone with the connection, so a late answer has no home.
                queue = Queue(f"liaison.{self.name}.status.{correlation_id}", exclusive=True, auto_delete=True)
                channel = conn.channel()
                with Consumer(channel, queues=[queue], on_message=on_message, no_ack=True, accept=[CONTENT_TYPE]):
                    command = status_command(job_id, uuid.uuid4().hex, correlation_id)
                    self._publish(conn, command, queue.name, expiration=deadline_s)
                    until = time.monotonic() + deadline_s
                    while not answer:
                        left = until - time.monotonic()
                        if left <= 0:
                            raise TransientError(f"{self.name}: no status reply within {deadline_s:g} s")
                        try:
                            conn.drain_events(timeout=left)
                        except TimeoutError:
                            continue
        except (TransientError, PermanentError):
            raise
        except BROKER_ERRORS as exc:
            raise TransientError(f"{self.name}: status call failed: {type(exc).__name__}") from None
        return self._read_reply(answer[0])

    def _read_reply(self, message: Message) -> Any:
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode("utf-8")
        if len(body) > self.max_response_bytes:
            raise self._refused(f"status reply of {len(body)} bytes refused (at most {self.max_response_bytes})")
        try:
            verify(self.settings.webhook_secrets, header_items(message.headers), body, time.time(), self.tolerance_s)
        except SignatureError as exc:
            raise self._refused(f"status reply signature rejected: {exc.reason}") from None
        try:
            return parse_status_reply(body, self.outcome_limits)
        except MalformedReply as exc:
            raise self._refused(f"status reply refused: {exc}") from None
