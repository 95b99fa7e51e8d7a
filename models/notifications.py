"""Notices to people, kept until sent: recorded with the incident that causes them, dispatched by
beat through the outbox (``service.notices``; ``core.notifications`` decides what goes out, alone
or as a digest).

A notice is inserted in the transaction that opens or resolves its incident, keyed by
``core.notifications.notice_key``: the unique key is what makes it once-only, whatever retries,
redeliveries or second beats do. This module holds the tables and a notice's states; the
statements that record, claim, settle and mute are the store's (``models.store.notices``:
``store_of(session).notices``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, Id, UtcDateTime, utcnow

PENDING = "pending"
DISPATCHED = "dispatched"
MUTED = "muted"
UNROUTED = "unrouted"  # no channel is configured for its kind: kept, never sent


class Notification(Base):
    __tablename__ = "notifications"
    __table_args__ = (
        Index("ix_notifications_state", "state", "id"),
        Index("ix_notifications_dispatched", "dispatched_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(2100))
    phase: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text)
    correlation_id: Mapped[str | None] = mapped_column(String(200))
    incident_id: Mapped[int | None] = mapped_column(Id)
    occurred_at: Mapped[datetime] = mapped_column(UtcDateTime)
    state: Mapped[str] = mapped_column(String(16), default=PENDING)
    #: the message (a single notice's key, or a digest's) it went out in
    message_key: Mapped[str | None] = mapped_column(String(64))
    #: when it was settled: sent, muted or unrouted (retention counts from here)
    dispatched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class NotificationMute(Base):
    """An incident kind an operator silenced: its notices are recorded and marked muted, not sent."""

    __tablename__ = "notification_mutes"

    kind: Mapped[str] = mapped_column(String(64), primary_key=True)
    muted_by: Mapped[str] = mapped_column(String(100))
    muted_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    note: Mapped[str | None] = mapped_column(Text)
