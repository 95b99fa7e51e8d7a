"""Rate-limit state in the database, for deployments whose broker is not Redis: one row per key
holding GCRA's single number (``core.rate_limit``), taken in one statement (:func:`take`)."""

from __future__ import annotations

from sqlalchemy import Float, String, bindparam, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from core.rate_limit import EPSILON_S, Decision, Limit, gcra
from models.base import Base, upsert


class RateLimitState(Base):
    __tablename__ = "rate_limits"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: GCRA's theoretical arrival time, epoch seconds (double precision: sub-microsecond today)
    tat: Mapped[float] = mapped_column(Float)


def take(session: Session, key: str, limit: Limit, now: float, max_wait_s: float = 0.0) -> Decision:
    """One slot of ``key`` at ``now``, in the caller's transaction: ``core.rate_limit.gcra`` applied
    by the database in one ``INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`` (it was a locking
    SELECT, a savepoint, an INSERT, its release and an UPDATE: five round trips for a key's first
    call, two after). The row is locked by the statement until the caller's commit, so concurrent
    callers of one key take their slots one after another; a first call always conforms (burst ≥ 1),
    so the INSERT needs no condition. A refused call changes nothing and reads the row once more,
    to say when to ask again."""
    interval = limit.interval_s
    params = {
        "key": key,
        "now": now,
        "interval": interval,
        "span": limit.burst * interval,
        # gcra's test, ``wait <= max(max_wait_s, 0)`` after a wait under EPSILON_S counts as 0
        "allow": max(EPSILON_S, max_wait_s, 0.0),
    }
    tat = session.scalar(_TAKE, params)
    if tat is not None:
        wait = tat - params["span"] - now  # the same doubles, in the same order, as gcra's
        return Decision(True, wait_s=0.0 if wait <= EPSILON_S else wait)
    _, decision = gcra(session.scalar(_READ, {"key": key}), now, limit, max_wait_s)
    return decision if not decision.allowed else Decision(False, retry_after_s=EPSILON_S)


_LATER = "(CASE WHEN rate_limits.tat > :now THEN rate_limits.tat ELSE :now END) + :interval"
_TAKE = upsert(
    "INSERT INTO rate_limits (key, tat) VALUES (:key, :now + :interval)"
    f" ON CONFLICT (key) DO UPDATE SET tat = {_LATER}"
    f" WHERE {_LATER} - :span - :now <= :allow"
    " RETURNING tat",
    key=String(),
    now=Float(),
    interval=Float(),
    span=Float(),
    allow=Float(),
)
_READ = select(RateLimitState.tat).where(RateLimitState.key == bindparam("key"))
