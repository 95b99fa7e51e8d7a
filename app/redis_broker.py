"""kombu's Redis transports (plain and Sentinel) with one change: a channel keeps the broker's address
(or the Sentinels' addresses) after its connection object is released, so a late close, restore or ack
on it is a broker error, never an ``AttributeError`` that ends the worker.

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

from collections.abc import Callable
from typing import Any

import redis as redis_py
from kombu.transport import redis
from kombu.utils.url import _parse_url
from redis.sentinel import Sentinel


def _kept_connparams(channel: Any, compute: Callable[[bool], dict[str, Any]], asynchronous: bool) -> dict[str, Any]:
    kept: dict[bool, dict[str, Any]] | None = channel.__dict__.get("_liaison_connparams")
    if kept is None:
        # first use, while the transport is attached (the channel's constructor connects): both
        # kinds at once, since a restore or ack after the release wants the one not used yet
        kept = {mode: compute(mode) for mode in (False, True)}
        channel.__dict__["_liaison_connparams"] = kept
    return dict(kept[asynchronous])


class Channel(redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        return _kept_connparams(self, lambda mode: super(Channel, self)._connparams(asynchronous=mode), asynchronous)


class Transport(redis.Transport):
    Channel = Channel


class SentinelChannel(redis.SentinelChannel):
    """The same for Redis Sentinel (``sentinel://``): the Sentinels' addresses are kept too, read from
    the connection's URL list while the transport is attached. Without it a worker whose primary
    died exited with the same AttributeError (bin/cluster-sim, the redis scenario: the calls workers)."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        return _kept_connparams(
            self, lambda mode: super(SentinelChannel, self)._connparams(asynchronous=mode), asynchronous
        )

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        client = self.connection.client
        if client is not None:  # attached (always at the constructor): kombu's own, noting the Sentinels
            if "_liaison_sentinels" not in self.__dict__:
                urls = [_parse_url(url) for url in client.alt]
                port = self.connection.default_port
                self.__dict__["_liaison_sentinels"] = [
                    (url.hostname, url.port or port) for url in urls if url.scheme == "sentinel"
                ]
            return super()._sentinel_managed_pool(asynchronous)
        # released (a late restore or ack): the pool kombu builds, from what was kept
        params = self._connparams(asynchronous)
        extra = {key: value for key, value in params.items() if key not in ("host", "port")}
        sentinels = self.__dict__.get("_liaison_sentinels") or [(params["host"], params["port"])]
        manager = Sentinel(
            sentinels,
            min_other_sentinels=getattr(self, "min_other_sentinels", 0),
            sentinel_kwargs=getattr(self, "sentinel_kwargs", None),
            **extra,
        )
        if asynchronous:
            self._async_sentinel_manager = manager  # closed again by _disconnect_pools, as kombu's
        else:
            self._sentinel_manager = manager
        credentials = {key: extra[key] for key in ("username", "password") if key in extra}
        master = getattr(self, "master_name", None)  # a transport option, checked by kombu at the constructor
        return manager.master_for(master, redis_py.Redis, **credentials).connection_pool


class SentinelTransport(redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(broker_url: str) -> str | None:
    """The transport class Celery should use for ``broker_url``: ours for ``redis://``, ``rediss://``
    and ``sentinel://``; ``None`` (kombu's choice) for the rest."""
    scheme = broker_url.split("://", 1)[0]
    if scheme == "sentinel":
        return "app.redis_broker:SentinelTransport"
    return "app.redis_broker:Transport" if scheme in ("redis", "rediss") else None
