"""What needs a person's attention: vendor events that match no task, incidents, and callback
endpoints paused by 410 Gone."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, Id, Json, UtcDateTime, utcnow
from models.client import Client


class OrphanEvent(Base):
    """A vendor event for a job we do not (yet) know; bound when a task learns that job id."""

    __tablename__ = "orphan_events"
    __table_args__ = (
        UniqueConstraint("source", "message_id"),
        Index("ix_orphan_events_lookup", "source", "vendor_job_id", "state"),
        Index(
            "ix_orphan_events_unflagged",
            "received_at",
            postgresql_where=text("state = 'open' AND flagged_at IS NULL"),
            sqlite_where=text("state = 'open' AND flagged_at IS NULL"),
        ),
        Index("ix_orphan_events_resolved_at", "resolved_at"),  # retention, oldest first
        # the console's list and count of open orphans
        Index(
            "ix_orphan_events_open", "id", postgresql_where=text("state = 'open'"), sqlite_where=text("state = 'open'")
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    source: Mapped[str] = mapped_column(String(100))
    message_id: Mapped[str] = mapped_column(String(200))
    vendor_job_id: Mapped[str] = mapped_column(String(200))
    payload: Mapped[dict[str, Any]] = mapped_column(Json)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="open")  # open | resolved | discarded
    resolved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    flagged_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # an incident was opened for it


class Incident(Base):
    """One per thing a person must look at. ``open_key`` is ``kind:subject`` while open and NULL
    once resolved, so the unique constraint allows one open incident per thing and any history."""

    __tablename__ = "incidents"
    __table_args__ = (Index("ix_incidents_open", "resolved_at", "kind"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    correlation_id: Mapped[str | None] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(2100))
    open_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    detail: Mapped[str] = mapped_column(Text)
    owner: Mapped[str | None] = mapped_column(String(100))
    opened_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class CallbackEndpoint(Base):
    """A client's callback URL that answered 410 Gone: that client's relays to it wait until it is
    re-enabled. Keyed by (client, URL): one tenant's 410 never pauses another's callbacks."""

    __tablename__ = "callback_endpoints"
    __table_args__ = (UniqueConstraint("client_id", "url_hash"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"))
    url_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the whole URL: too long to index
    url: Mapped[str] = mapped_column(String(2000))  # core.urls.strip_url of it: shown to operators
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    enabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    client: Mapped[Client] = relationship()
