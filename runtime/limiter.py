"""Shared rate limits: one small interface, two storages, chosen by ``LIAISON_RATE_LIMIT_STORAGE``.

Every web, worker and beat process on every host asks the same storage, so a limit holds for the
deployment, not per process. Both storages apply the same GCRA step (``core.rate_limit.gcra``)
atomically to one number per key:

- ``RedisLimiter``: a Lua script (Redis runs it atomically), the key expiring once the bucket is full
  again. The default when the broker is Redis.
- ``DatabaseLimiter``: a ``rate_limits`` row upserted by one conditional statement
  (``models.store.rate_limits``), in a short transaction of its own or in the caller's, committed
  with its work (``acquire_in``: the submit; ``acquire_with``: a vendor call's start). Fine at the
  rates a vendor or a domain app is allowed, and it needs no other server.

**Fails open.** When the storage cannot be reached, the call is allowed and a warning logged: a
Redis or database outage must not turn every submit into a 500 (the outbox promises a submit
succeeds while the broker is down) nor stop every vendor call; the limits come back with the storage.

**The storage's clock.** ``now`` is read by the storage once it holds the key (``TIME`` inside the
Redis script; the database's clock inside the statement, ``models.store.rate_limits``), never by the
caller before it: GCRA assumes arrivals in order, and callers of one key queue for it (a database
row stays locked until its holder's commit, a submit's included). A ``now`` read before that wait
was older than the times the holders ahead of it moved the key on with, and such a caller was refused
though its client had stayed well under the limit. One clock for every host, too: hosts' clock skew
does not matter to a limit. Tests inject ``clock`` (or pass ``now``) to drive time; either is then
used as given, so both storages and the pure function can be compared step by step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from core.rate_limit import EPSILON_S, Decision, Limit
from models.db import Database
from models.store import store_of

log = logging.getLogger(__name__)


def _fail_open(key: str, exc: Exception) -> Decision:
    log.warning("rate limit storage unavailable (%s); %s allowed without a limit", type(exc).__name__, key)
    return Decision(True)


class RateLimited(Exception):
    """A call was refused a slot; ``retry_after_s`` says when asking again can succeed. Not a
    ``CallError``: nothing was sent, and a retry for it consumes no attempt."""

    def __init__(self, key: str, retry_after_s: float) -> None:
        super().__init__(f"rate limit {key}: next slot in {retry_after_s:.2f}s")
        self.key = key
        self.retry_after_s = retry_after_s


class Limiter(Protocol):
    def acquire(self, key: str, limit: Limit, *, max_wait_s: float = 0.0, now: float | None = None) -> Decision:
        """Take one slot of ``key`` at ``now`` (default: the storage's clock once it holds the key,
        or the injected ``clock``); see ``core.rate_limit.gcra``."""

    def acquire_with(self, session: Session, key: str, limit: Limit, *, max_wait_s: float = 0.0) -> Decision | None:
        """A slot taken in ``session``'s transaction, committed with the caller's work, when this
        storage is that database; None when it is elsewhere (the caller then calls ``acquire``)."""


def _given(clock: Callable[[], float] | None, now: float | None) -> float | None:
    """The ``now`` a take is asked for: the caller's, the injected clock's, or None -- the storage's."""
    if now is not None or clock is None:
        return now
    return clock()


class DatabaseLimiter:
    def __init__(self, db: Database, clock: Callable[[], float] | None = None) -> None:
        """``clock``: None (deployments) for the database's own; tests inject one to drive time."""
        self.db = db
        self.clock = clock

    def acquire(self, key: str, limit: Limit, *, max_wait_s: float = 0.0, now: float | None = None) -> Decision:
        now = _given(self.clock, now)
        try:
            return self._acquire(key, limit, max_wait_s, now)
        except OperationalError as exc:  # unreachable, or SQLite busy past its timeout
            return _fail_open(key, exc)

    def _acquire(self, key: str, limit: Limit, max_wait_s: float, now: float | None) -> Decision:
        with self.db.transaction() as session:
            return store_of(session).rate_limits.take(session, key, limit, now, max_wait_s)

    def acquire_with(self, session: Session, key: str, limit: Limit, *, max_wait_s: float = 0.0) -> Decision | None:
        """:meth:`acquire` in a transaction that holds other work (a vendor call's start: its row's
        claim and count), committed with it. It does not fail open: the storage is that
        transaction's own database, so an error fails the transaction, which its caller retries."""
        return store_of(session).rate_limits.take(session, key, limit, _given(self.clock, None), max_wait_s)

    def acquire_in(
        self, session: Session, key: str, limit: Limit, *, max_wait_s: float = 0.0, now: float | None = None
    ) -> Decision:
        """:meth:`acquire` in the caller's transaction, which commits it with the rest of its work
        (the submit: its authentication's read, then its task or its refusal, one commit). The row
        stays locked until then, so the caller keeps that transaction short. Fails open as
        :meth:`acquire` does, rolling that transaction back first."""
        now = _given(self.clock, now)
        try:
            return store_of(session).rate_limits.take(session, key, limit, now, max_wait_s)
        except OperationalError as exc:
            session.rollback()
            return _fail_open(key, exc)


# The same arithmetic as ``gcra`` (keep them in step; tests/integration/test_limits.py compares them).
# Floats go in and out as strings: Redis would truncate a Lua number reply to an integer.
# ``now`` empty: the server's clock, read inside the script (Redis runs one script at a time, so a
# key sees its callers in the order they reach it, not the order they set out). TIME is allowed in a
# script that then writes: Redis replicates a script's effects, not the script (always from 7.0; by
# default from 5.0).
_GCRA_LUA = """
local now
if ARGV[1] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) + tonumber(time[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local epsilon = tonumber(ARGV[5])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local wait = new_tat - burst * interval - now
if wait <= epsilon then wait = 0 end
if max_wait < 0 then max_wait = 0 end
if wait <= max_wait then
  redis.call('SET', KEYS[1], string.format('%.17g', new_tat), 'PX', math.ceil((new_tat - now) * 1000) + 1000)
  return {1, string.format('%.17g', wait), '0'}
end
return {0, '0', string.format('%.17g', wait - max_wait)}
"""


class RedisLimiter:
    def __init__(self, url: str, prefix: str, clock: Callable[[], float] | None = None) -> None:
        """``clock``: None (deployments) for the Redis server's own; tests inject one to drive time."""
        import redis  # only deployments on Redis need the client

        self._redis_errors = redis.exceptions
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix = prefix
        self.clock = clock
        self._script = self.client.register_script(_GCRA_LUA)

    def acquire(self, key: str, limit: Limit, *, max_wait_s: float = 0.0, now: float | None = None) -> Decision:
        now = _given(self.clock, now)
        try:
            allowed, wait, retry = self._script(
                keys=[self.prefix + key],
                args=[
                    "" if now is None else repr(now),
                    repr(limit.interval_s),
                    limit.burst,
                    repr(max_wait_s),
                    repr(EPSILON_S),
                ],
            )
        except (self._redis_errors.ConnectionError, self._redis_errors.TimeoutError) as exc:
            return _fail_open(key, exc)
        if int(allowed):
            return Decision(True, wait_s=float(wait))
        return Decision(False, retry_after_s=float(retry))

    def acquire_with(self, session: Session, key: str, limit: Limit, *, max_wait_s: float = 0.0) -> Decision | None:
        """None: Redis is not ``session``'s database, so nothing is gained by taking it there."""
        return None

    def close(self) -> None:
        self.client.close()


def build_limiter(storage: str, db: Database, *, redis_url: str = "", namespace: str = "liaison") -> Limiter:
    """The limiter settings ask for. ``namespace`` (the work queue's name) keeps two deployments
    sharing one Redis apart, as their queues already must be."""
    if storage == "redis":
        return RedisLimiter(redis_url, prefix=f"liaison:rate:{namespace}:")
    return DatabaseLimiter(db)
