"""Reconciliation's side of the database: claim tasks quiet at the vendor (or never submitted), and
apply what the vendor's status says through the same path as a webhook. Claims follow the rules of
``service.lifecycle`` (partial-index predicates, ``FOR NO KEY UPDATE SKIP LOCKED``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.states import EventType
from models.messages import MAX_MESSAGE_ID_CHARS, OutboxMessage
from models.publishing import publish_after_commit
from models.store import store_of
from models.store.vendor_jobs import (
    quiet_query as quiet_query,  # the beat-safety test and bench/beat_jobs.py explain it
)
from service.incidents import IncidentKind, open_incident
from service.vendor_events import EventResult, receive_event
from webhooks.events import VendorEvent


@dataclass(frozen=True)
class QuietTask:
    task_id: int
    correlation_id: str
    vendor_job_id: str
    traceparent: str | None = None  # the task's: asking the vendor about it continues its trace


def claim_quiet(session: Session, provider: str, quiet_s: int, now: datetime, batch: int) -> list[QuietTask]:
    """Tasks at the vendor with no news for ``quiet_s``, oldest first; claimed by moving checked_at."""
    tasks = store_of(session).vendor_jobs.claim_quiet(session, provider, quiet_s, now, batch)
    for task in tasks:
        task.checked_at = now
    return [QuietTask(t.id, t.correlation_id, t.vendor_job_id, t.traceparent) for t in tasks if t.vendor_job_id]


def claim_unsubmitted(session: Session, quiet_s: int, now: datetime, batch: int) -> list[OutboxMessage]:
    """Tasks stuck in ``requested``: their submit rows, published again after commit (consumers are idempotent)."""
    vendor_jobs = store_of(session).vendor_jobs
    tasks = vendor_jobs.claim_unsubmitted(session, quiet_s, now, batch)
    for task in tasks:
        task.checked_at = now
    if not tasks:
        return []
    rows = vendor_jobs.open_submits(session, [t.id for t in tasks])
    publish_after_commit(session, rows)  # again: consumers are idempotent
    return rows


_SNAPSHOT_EVENTS = {
    "running": EventType.ACCEPTED,
    "succeeded": EventType.COMPLETED,
    "failed": EventType.COMPLETED,
    "canceled": EventType.COMPLETED,
}


def apply_snapshot(
    session: Session, provider: str, job_id: str, status: str, outcome: Any, now: datetime
) -> EventResult | None:
    """What the vendor's status says, applied through exactly the webhook's path. The message id is
    derived from the job and status, so asking twice applies once."""
    event_type = _SNAPSHOT_EVENTS.get(status)
    if event_type is None:  # queued: nothing new
        return None
    event = VendorEvent(
        event_type,
        job_id,
        status if event_type is EventType.COMPLETED else None,
        outcome if event_type is EventType.COMPLETED else None,
    )
    message_id = f"reconcile:{job_id}:{status}"
    if len(message_id) > MAX_MESSAGE_ID_CHARS:
        message_id = "reconcile:" + hashlib.sha256(message_id.encode()).hexdigest()
    return receive_event(session, provider, message_id, event, now)


def unknown_job(session: Session, task: QuietTask, provider: str, error: str, now: datetime) -> None:
    open_incident(
        session,
        IncidentKind.UNKNOWN_JOB,
        f"job:{provider}:{task.vendor_job_id}",
        f"{provider} does not know job {task.vendor_job_id}: {error}",
        now,
        correlation_id=task.correlation_id,
    )


# --- Orphans ---
