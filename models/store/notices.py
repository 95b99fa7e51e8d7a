"""Notices to people (``models.notifications``: the ``notifications`` and ``notification_mutes``
tables): a notice recorded once with the incident that causes it, the pending ones claimed for a
dispatch and settled by it (``service.notices`` decides what goes out, ``core.notifications`` how),
and the kinds operators muted.

Both databases run the same statements (``INSERT … ON CONFLICT DO NOTHING``, ``SKIP LOCKED`` that
SQLite leaves out: its ``BEGIN IMMEDIATE`` serialises writers), so one class serves both stores.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.notifications import notice_key
from models.base import upsert
from models.notifications import PENDING, Notification, NotificationMute


class Notices:
    """The verbs of notices, alike on both databases."""

    def record(
        self,
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
        """Once per (kind, subject, opening, phase), in the caller's transaction: the unique key
        (``core.notifications.notice_key``) makes it once-only, whatever retries, redeliveries or
        second beats do."""
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

    def claim_pending(self, session: Session, batch: int) -> list[Notification]:
        """The first ``batch`` pending notices, locked for the caller's transaction (``SKIP LOCKED``:
        another run's are left to it)."""
        return list(
            session.scalars(
                select(Notification)
                .where(Notification.state == PENDING)
                .order_by(Notification.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            )
        )

    def muted_kinds(self, session: Session) -> set[str]:
        """The incident kinds operators muted."""
        return set(session.scalars(select(NotificationMute.kind)))

    def messages_since(self, session: Session, since: datetime) -> int:
        """Messages sent after ``since`` (a digest's window): the distinct messages its notices went out in."""
        sent = session.scalar(
            select(func.count(func.distinct(Notification.message_key))).where(Notification.dispatched_at > since)
        )
        return sent or 0

    def settle(self, notice: Notification, state: str, now: datetime, message_key: str | None = None) -> None:
        """The notice is settled at ``now``: sent (in message ``message_key``), muted or unrouted
        (retention counts from here). Written by the caller's flush."""
        notice.state, notice.dispatched_at = state, now
        if message_key is not None:
            notice.message_key = message_key

    def mute(self, session: Session, kind: str, by: str, note: str | None, now: datetime) -> bool:
        """False when the kind was muted already (the first mute is kept; two at once meet at the key)."""
        done = session.execute(_MUTE, {"kind": kind, "muted_by": by, "muted_at": now, "note": note}).first()
        return done is not None

    def unmute(self, session: Session, kind: str) -> bool:
        """False when the kind was not muted."""
        row = session.get(NotificationMute, kind)
        if row is None:
            return False
        session.delete(row)
        return True

    def mutes(self, session: Session) -> list[NotificationMute]:
        """Every muted kind, by name."""
        return list(session.scalars(select(NotificationMute).order_by(NotificationMute.kind)))


_RECORD = upsert(
    "INSERT INTO notifications (key, kind, subject, phase, detail, correlation_id, incident_id, occurred_at, state)"
    " VALUES (:key, :kind, :subject, :phase, :detail, :correlation_id, :incident_id, :occurred_at, 'pending')"
    " ON CONFLICT (key) DO NOTHING",
    occurred_at=Notification.occurred_at.type,
)
_MUTE = upsert(
    "INSERT INTO notification_mutes (kind, muted_by, muted_at, note) VALUES (:kind, :muted_by, :muted_at, :note)"
    " ON CONFLICT (kind) DO NOTHING RETURNING kind",
    muted_at=NotificationMute.muted_at.type,
)
