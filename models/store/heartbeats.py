"""Beat's heartbeat row (``models/heartbeats.py``): its tick written and its liveness read. One
module for both databases: the upsert is ``INSERT … ON CONFLICT`` on both (``models.base.upsert``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from core.beat_liveness import BeatLiveness, liveness
from models.base import UtcDateTime, upsert
from models.db import Database
from models.heartbeats import BEAT, BeatHeartbeat

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
    """When beat last ticked and how long it meant to sleep, judged at ``now``; ``session``: a
    session or a Core connection (the probe and the scrape read through one)."""
    row = session.execute(_LIVENESS).first()
    return liveness(row[0], row[1], now) if row else liveness(None, None, now)


_LIVENESS = select(BeatHeartbeat.ticked_at, BeatHeartbeat.interval_s).where(BeatHeartbeat.name == BEAT)
