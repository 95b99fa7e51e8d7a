"""Publishing one signed message to a queue and waiting for RabbitMQ's confirm: how the simulator
in broker mode sends a job's events (``simulator.dispatch``) and its status replies
(``simulator.broker``)."""

from __future__ import annotations

import time

import kombu.exceptions
from amqp.exceptions import MessageNacked  # type: ignore[import-untyped]  # kombu's AMQP client
from kombu import Connection, Producer

from simulator.settings import Settings
from webhooks.signing import sign
from wire.broker_messages import CONTENT_TYPE

_BROKER_ERRORS = (OSError, kombu.exceptions.KombuError, kombu.exceptions.ConnectionError, kombu.exceptions.ChannelError)


class BrokerError(OSError):
    """A publish the broker did not confirm."""


def publish_signed(
    settings: Settings, queue: str, body: bytes, *, message_id: str, type_: str, correlation_id: str
) -> None:
    """Publish ``body`` to ``queue`` (default exchange), signed, and wait for the broker's confirm."""
    headers = sign(settings.webhook_secret, message_id, int(time.time()), body).as_dict()
    try:
        with Connection(settings.amqp_url, connect_timeout=5, transport_options={"confirm_publish": True}) as conn:
            Producer(conn.default_channel).publish(
                body,
                exchange="",
                routing_key=queue,
                mandatory=True,
                content_type=CONTENT_TYPE,
                content_encoding="utf-8",
                delivery_mode=2,
                headers=headers,
                type=type_,
                message_id=message_id,
                correlation_id=correlation_id,
                retry=False,
                confirm_timeout=settings.webhook_timeout_s,
            )
    except (*_BROKER_ERRORS, MessageNacked) as exc:
        raise BrokerError(f"{type(exc).__name__}: {exc}") from None
