"""The database rate limit's one statement (``core.rate_limit``'s GCRA, applied by the database), per
database: the two differ only in the clock they read (``RateLimits.take`` says why it is theirs)."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import Float, String, TextClause, bindparam, text
from sqlalchemy.orm import Session

from core.rate_limit import EPSILON_S, Decision, Limit, gcra
from models.base import upsert


def _statements(clock: str) -> tuple[TextClause, TextClause]:
    """The take and the refused call's read, ``clock`` being the database's time in epoch seconds,
    used where no ``:now`` is bound. Both return the ``now`` they used (PostgreSQL's
    ``clock_timestamp()`` moves within a statement: the one returned is read last, a hair later than
    the ``WHERE``'s, so a granted wait comes out a hair short, never long)."""
    now = f"COALESCE(CAST(:now AS DOUBLE PRECISION), {clock})"
    later = f"(CASE WHEN rate_limits.tat > {now} THEN rate_limits.tat ELSE {now} END) + :interval"
    take = upsert(
        f"INSERT INTO rate_limits (key, tat) VALUES (:key, {now} + :interval)"
        f" ON CONFLICT (key) DO UPDATE SET tat = {later}"
        f" WHERE {later} - :span - {now} <= :allow"
        f" RETURNING tat, {now}",
        key=String(),
        now=Float(),
        interval=Float(),
        span=Float(),
        allow=Float(),
    )
    read = text(f"SELECT tat, {now} FROM rate_limits WHERE key = :key").bindparams(
        bindparam("key", type_=String()), bindparam("now", type_=Float())
    )
    return take, read


#: Epoch seconds to the microsecond. ``EXTRACT`` is numeric from PostgreSQL 14 on: cast, as ``tat`` is.
_POSTGRESQL = _statements("CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)")
#: Epoch seconds to the millisecond (SQLite's ``'now'``), exactly: whole seconds plus ``%f``'s
#: fraction (``julianday`` loses tens of microseconds in its double).
_SQLITE = _statements(
    "(CAST(strftime('%s', 'now') AS INTEGER)"
    " + (CAST(strftime('%f', 'now') AS REAL) - CAST(strftime('%S', 'now') AS INTEGER)))"
)


class RateLimits:
    """A key's slot taken in the caller's transaction (``runtime.limiter.DatabaseLimiter``)."""

    #: the take and the refused call's read, with this database's clock
    statements: ClassVar[tuple[TextClause, TextClause]]

    def take(self, session: Session, key: str, limit: Limit, now: float | None, max_wait_s: float = 0.0) -> Decision:
        """One slot of ``key`` at ``now``, in the caller's transaction: ``core.rate_limit.gcra`` applied
        by the database in one ``INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`` (it was a locking
        SELECT, a savepoint, an INSERT, its release and an UPDATE: five round trips for a key's first
        call, two after). The row is locked by the statement until the caller's commit, so concurrent
        callers of one key take their slots one after another; a first call always conforms (burst ≥ 1),
        so the INSERT needs no condition. A refused call changes nothing and reads the row once more,
        to say when to ask again.

        ``now`` None: the database's own clock, read by the statement once it holds the key, so callers
        arrive in the order they took it. A ``now`` read by the caller before the statement waited for
        the row (PostgreSQL: another transaction's slot, held until its commit; SQLite: the write lock,
        at ``BEGIN IMMEDIATE``) is older than the times later holders moved ``tat`` on with, and GCRA
        refused such a caller though its client never went over the limit (a 429 at 120 submits against
        1000 per second, bursts of 1000). PostgreSQL evaluates ``ON CONFLICT DO UPDATE``'s ``WHERE`` and
        ``SET`` once the conflicting row is locked (a row updated meanwhile sends the insert back to its
        start, then locked again without waiting), so ``clock_timestamp()`` there is read after the wait;
        SQLite's ``'now'`` is one value for the whole statement, read after the lock the transaction
        already holds. One clock for every host, too. A ``now`` given (tests driving the clock) is used
        as is."""
        interval = limit.interval_s
        params = {
            "key": key,
            "now": now,
            "interval": interval,
            "span": limit.burst * interval,
            # gcra's test, ``wait <= max(max_wait_s, 0)`` after a wait under EPSILON_S counts as 0
            "allow": max(EPSILON_S, max_wait_s, 0.0),
        }
        statements = self.statements
        row = session.execute(statements[0], params).one_or_none()
        if row is not None:
            tat, at = row
            wait = tat - params["span"] - at  # the same doubles, in the same order, as gcra's
            return Decision(True, wait_s=0.0 if wait <= EPSILON_S else wait)
        row = session.execute(statements[1], {"key": key, "now": now}).one()
        _, decision = gcra(row[0], row[1], limit, max_wait_s)
        return decision if not decision.allowed else Decision(False, retry_after_s=EPSILON_S)


class PostgresRateLimits(RateLimits):
    statements = _POSTGRESQL


class SqliteRateLimits(RateLimits):
    statements = _SQLITE
