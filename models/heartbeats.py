"""Beat's heartbeat: one row, rewritten at every tick (``app.beat.HeartbeatScheduler``), read by
``/readyz``, ``/metrics`` and ``liaison beat check``. In the database, so every web process and the
CLI see the same answer whichever host beat runs on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Float, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from core.beat_liveness import BeatLiveness, liveness
from models.base import Base, UtcDateTime, upsert
from models.db import Database

BEAT = "beat"


class BeatHeartbeat(Base):
    __tablename__ = "beat_heartbeats"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    ticked_at: Mapped[datetime] = mapped_column(UtcDateTime)
    #: the longest this beat should sleep between ticks (core.beat_liveness.expected_interval_s)
    interval_s: Mapped[float] = mapped_column(Float)
    holder: Mapped[str] = mapped_column(String(200))  # host:pid of the beat that wrote it


_BEAT = upsert(
    "INSERT INTO beat_heartbeats (name, ticked_at, interval_s, holder) VALUES (:name, :at, :interval_s, :holder)"
    " ON CONFLICT (name) DO UPDATE SET ticked_at = excluded.ticked_at, interval_s = excluded.interval_s,"
    " holder = excluded.holder",
    at=UtcDateTime(),
)


def record_tick(db: Database, at: datetime, interval_s: float, holder: str) -> None:
    """One statement in a short transaction of its own. Two beats write the same row: the
    question is whether *a* beat is alive."""
    with db.transaction() as session:
        session.execute(_BEAT, {"name": BEAT, "at": at, "interval_s": interval_s, "holder": holder})


def beat_liveness(session: Session | Connection, now: datetime) -> BeatLiveness:
    row = session.execute(
        select(BeatHeartbeat.ticked_at, BeatHeartbeat.interval_s).where(BeatHeartbeat.name == BEAT)
    ).first()
    return liveness(row[0], row[1], now) if row else liveness(None, None, now)
