"""kombu's Redis transport with one change: a channel keeps the broker's address after its
connection object is released, so a late close, restore or ack on it is a broker error, never an
``AttributeError`` that ends the worker.

What ended workers when Redis restarted (issue 41.1; kombu issue #582, Celery #4652): the consumer's
connection breaks and Celery cleans it up in two steps (``celery/worker/consumer/consumer.py``,
``on_connection_error_after_connected``): ``connection.collect()``, then ``connection.close()``.
``collect`` closes the channels while the broker is still down, and the first Redis command of a
channel's ``close`` (the pending BRPOP read, the fanout bindings' delete) raises a connection error
before the channel is marked closed; kombu ignores it and, still in ``collect``, releases the
transport (``transport.client = None``). ``close`` then closes the same channel again, and this
time it gets as far as restoring the messages it holds unacked, which needs a new Redis client,
whose address is read from ``transport.client.hostname``: ``AttributeError: 'NoneType' object has
no attribute 'hostname'``. That is neither a connection nor a channel error, so nothing on the way
up catches it and the worker exits (``Unrecoverable error``), with every message it held left in
Redis's unacked hash until the visibility timeout (12 h) or the outbox lease (30 min).

Here the connection parameters a channel computed while its transport was attached are kept on
the channel (they never change: one broker URL per process). A restore or ack on a released
channel then opens a fresh connection to the same broker: while Redis is down that is a
``ConnectionError``, which kombu and Celery handle; once it is back, the restore or ack simply
happens. ``app.consumers.broker_loss`` puts back, after the reconnect, what could not be restored
while the broker was down.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        kept: dict[bool, dict[str, Any]] | None = self.__dict__.get("_liaison_connparams")
        if kept is None:
            # first use, while the transport is attached (the channel's constructor connects): both
            # kinds at once, since a restore or ack after the release wants the one not used yet
            kept = {mode: super(Channel, self)._connparams(asynchronous=mode) for mode in (False, True)}
            self.__dict__["_liaison_connparams"] = kept
        return dict(kept[asynchronous])


class Transport(redis.Transport):
    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """The transport class Celery should use for ``broker_url``: ours for ``redis://`` and
    ``rediss://``; ``None`` (kombu's choice) for the rest."""
    scheme = broker_url.split("://", 1)[0]
    return "app.redis_broker:Transport" if scheme in ("redis", "rediss") else None
