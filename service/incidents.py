"""Incidents: one open per thing a person must look at; resolving keeps the history."""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy.orm import Session, object_session

from core.notifications import OPENED, RESOLVED
from models.attention import Incident
from models.store import store_of


class IncidentKind:
    SUBMIT_FAILED = "submit_failed"
    RELAY_FAILED = "relay_failed"
    CANCEL_FAILED = "cancel_failed"
    POISON_MESSAGE = "poison_message"
    ENDPOINT_DISABLED = "callback_endpoint_disabled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    UNKNOWN_JOB = "unknown_job"
    ORPHAN_UNBOUND = "orphan_unbound"
    #: a beat job or reconciliation could not process one task and went on without it (issue 8)
    BATCH_ROW_FAILED = "batch_row_failed"
    #: a message to people could not be sent (never notified itself: core.notifications.NOT_NOTIFIED)
    NOTIFICATION_FAILED = "notification_failed"

    ALL = (
        SUBMIT_FAILED,
        RELAY_FAILED,
        CANCEL_FAILED,
        POISON_MESSAGE,
        ENDPOINT_DISABLED,
        DEADLINE_EXCEEDED,
        UNKNOWN_JOB,
        ORPHAN_UNBOUND,
        BATCH_ROW_FAILED,
        NOTIFICATION_FAILED,
    )


def _open_key(kind: str, subject: str) -> str:
    return hashlib.sha256(f"{kind}:{subject}".encode()).hexdigest()


def open_incident(
    session: Session, kind: str, subject: str, detail: str, now: datetime, correlation_id: str | None = None
) -> Incident:
    """The open incident for (kind, subject), created if there is none. Concurrent openers meet at
    the unique ``open_key``: the loser's savepoint rolls back and it returns the winner's row."""
    key = _open_key(kind, subject)
    attention = store_of(session).attention
    existing = attention.open_incident(session, key)
    if existing is not None:
        existing.detail = detail
        return existing
    incident = Incident(
        kind=kind, subject=subject, open_key=key, detail=detail, opened_at=now, correlation_id=correlation_id
    )
    if (added := attention.add_incident(session, incident)) is not incident:
        return added  # a concurrent opener's
    _notify(session, incident, OPENED, now)
    return incident


def resolve_incident(incident: Incident, now: datetime, note: str | None = None) -> bool:
    """False when it was resolved already (idempotent)."""
    if incident.resolved_at is not None:
        return False
    incident.resolved_at = now
    incident.open_key = None
    if note:
        incident.detail = f"{incident.detail}\nresolved: {note}"
    session = object_session(incident)
    if session is not None:
        _notify(session, incident, RESOLVED, now)
    return True


def _notify(session: Session, incident: Incident, phase: str, now: datetime) -> None:
    """People hear of an incident's opening and resolution once each (models.store.notices)."""
    store_of(session).notices.record(
        session,
        kind=incident.kind,
        subject=incident.subject,
        phase=phase,
        opened_at=incident.opened_at,
        occurred_at=now,
        detail=incident.detail,
        correlation_id=incident.correlation_id,
        incident_id=incident.id,
    )


def resolve_open(session: Session, kind: str, subject: str, now: datetime, note: str) -> None:
    incident = store_of(session).attention.open_incident(session, _open_key(kind, subject))
    if incident is not None:
        resolve_incident(incident, now, note)
