"""Beat's heartbeat: one row, rewritten at every tick (``app.beat.HeartbeatScheduler``), read by
``/readyz``, ``/metrics`` and ``liaison beat check``. In the database, so every web process and the
CLI see the same answer whichever host beat runs on. Its statements are the store's
(``models/store/heartbeats.py``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UtcDateTime

BEAT = "beat"


class BeatHeartbeat(Base):
    __tablename__ = "beat_heartbeats"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    ticked_at: Mapped[datetime] = mapped_column(UtcDateTime)
    #: the longest this beat should sleep between ticks (core.beat_liveness.expected_interval_s)
    interval_s: Mapped[float] = mapped_column(Float)
    holder: Mapped[str] = mapped_column(String(200))  # host:pid of the beat that wrote it
