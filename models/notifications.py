"""Notices to people, kept until sent: recorded with the incident that causes them, dispatched by
beat through the outbox (``core.notifications`` decides what goes out, alone or as a digest).

A notice is inserted in the transaction that opens or resolves its incident, keyed by
``core.notifications.notice_key``: the unique key is what makes it once-only, whatever retries,
redeliveries or second beats do. Dispatch claims pending notices (``SKIP LOCKED``; SQLite's
``BEGIN IMMEDIATE`` serialises it), writes one outbox row per channel and message, and marks the
notices dispatched, in one transaction; the outbox row's unique ``message_id`` (derived from the
message key) is a second guard.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Index, String, Text, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from core.notifications import (
    CHANNELS,
    DigestRule,
    Message,
    Notice,
    for_channel,
    notice_key,
    payload,
    plan,
    routed,
)
from models.base import Base, Id, UtcDateTime, upsert, utcnow
from models.messages import OutboxKind
from models.store import store_of

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


_RECORD = upsert(
    "INSERT INTO notifications (key, kind, subject, phase, detail, correlation_id, incident_id, occurred_at, state)"
    " VALUES (:key, :kind, :subject, :phase, :detail, :correlation_id, :incident_id, :occurred_at, 'pending')"
    " ON CONFLICT (key) DO NOTHING",
    occurred_at=Notification.occurred_at.type,
)


def record_notice(
    session: Session,
    *,
    kind: str,
    subject: str,
    phase: str,
    opened_at: datetime,
    occurred_at: datetime,
    detail: str,
    correlation_id: str | None,
    incident_id: int | None,
) -> None:
    """Once per (kind, subject, opening, phase), in the caller's transaction."""
    session.execute(
        _RECORD,
        {
            "key": notice_key(kind, subject, opened_at, phase),
            "kind": kind,
            "subject": subject[:2100],
            "phase": phase,
            "detail": detail,
            "correlation_id": correlation_id,
            "incident_id": incident_id,
            "occurred_at": occurred_at,
        },
    )


@dataclass(frozen=True)
class Routes:
    """Which incident kinds each channel is configured for (None: the channel is off)."""

    email: frozenset[str] | None = None
    chat: frozenset[str] | None = None

    def of(self, channel: str) -> frozenset[str] | None:
        return self.email if channel == "email" else self.chat

    def any(self, kind: str) -> bool:
        return any(routed(kind, self.of(channel)) for channel in CHANNELS)


@dataclass(frozen=True)
class Dispatched:
    messages: int = 0  # outbox rows written (one per channel and message)
    notices: int = 0
    muted: int = 0
    held: int = 0  # pending, gathered for a digest


#: Notices one dispatch reads: far more than a beat batch, so a burst is one digest, not several.
NOTICE_BATCH = 10_000


def dispatch(
    session: Session,
    now: datetime,
    routes: Routes,
    rule: DigestRule,
    batch: int = NOTICE_BATCH,
    console_url: str | None = None,
) -> Dispatched:
    """Turn pending notices into outbox rows, in the caller's transaction.

    One run at a time: on PostgreSQL a run that finds another under way does nothing (a
    transaction-level advisory lock, tried, not waited for). Two runs side by side would each
    take part of a burst (``SKIP LOCKED``) and send it as two digests; SQLite serialises writers."""
    if not store_of(session).locks.try_lock(session, _DISPATCH_KEY):
        return Dispatched()
    rows = session.scalars(
        select(Notification)
        .where(Notification.state == PENDING)
        .order_by(Notification.id)
        .limit(batch)
        .with_for_update(skip_locked=True)
    ).all()
    if not rows:
        return Dispatched()
    muted_kinds = set(session.scalars(select(NotificationMute.kind)))
    muted = 0
    live: list[Notification] = []
    for row in rows:
        if row.kind in muted_kinds:
            row.state, row.dispatched_at, muted = MUTED, now, muted + 1
        elif not routes.any(row.kind):
            row.state, row.dispatched_at = UNROUTED, now  # settled: retention counts from here
        else:
            live.append(row)
    sent_in_window = session.scalar(
        select(func.count(func.distinct(Notification.message_key))).where(
            Notification.dispatched_at > now - timedelta(seconds=rule.window_s)
        )
    )
    by_id = {row.id: row for row in live}
    messages = plan([_notice(row) for row in live], sent_in_window or 0, now, rule)
    written = 0
    for message in messages:
        written += _outbox(session, message, routes, now, console_url)
        for notice in message.notices:
            row = by_id[notice.id]
            row.state, row.message_key, row.dispatched_at = DISPATCHED, message.key, now
    sent = sum(len(m.notices) for m in messages)
    return Dispatched(messages=written, notices=sent, muted=muted, held=len(live) - sent)


_DISPATCH_KEY = int.from_bytes(hashlib.blake2b(b"notifications.dispatch", digest_size=8).digest(), "big", signed=True)


def _notice(row: Notification) -> Notice:
    return Notice(row.id, row.key, row.kind, row.subject, row.phase, row.detail, row.occurred_at, row.correlation_id)


def _outbox(session: Session, message: Message, routes: Routes, now: datetime, console_url: str | None) -> int:
    written = 0
    for channel in CHANNELS:
        part = for_channel(message, routes.of(channel))
        if part is None:
            continue
        message_id = hashlib.sha256(f"notify:{channel}:{part.key}".encode()).hexdigest()
        body = payload(channel, part, console_url)
        session.add(store_of(session).outbox.new_row(OutboxKind.NOTIFY, message_id, body, now, target=channel))
        written += 1
    return written


_MUTE = upsert(
    "INSERT INTO notification_mutes (kind, muted_by, muted_at, note) VALUES (:kind, :muted_by, :muted_at, :note)"
    " ON CONFLICT (kind) DO NOTHING RETURNING kind",
    muted_at=NotificationMute.muted_at.type,
)


def mute(session: Session, kind: str, by: str, note: str | None, now: datetime) -> bool:
    """False when the kind was muted already (the first mute is kept; two at once meet at the key)."""
    done = session.execute(_MUTE, {"kind": kind, "muted_by": by, "muted_at": now, "note": note}).first()
    return done is not None


def unmute(session: Session, kind: str) -> bool:
    row = session.get(NotificationMute, kind)
    if row is None:
        return False
    session.delete(row)
    return True


def mutes(session: Session) -> list[NotificationMute]:
    return list(session.scalars(select(NotificationMute).order_by(NotificationMute.kind)))
