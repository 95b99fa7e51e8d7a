"""Reconciliation's side of the database: claim tasks quiet at the vendor (or never submitted), and
apply what the vendor's status says through the same path as a webhook. Claims follow the rules of
``service.lifecycle`` (partial-index predicates, ``FOR NO KEY UPDATE SKIP LOCKED``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, select, text
from sqlalchemy.orm import Session, load_only

from core.states import EventType
from models.messages import MAX_MESSAGE_ID_CHARS, PUBLISH_COLUMNS, OutboxKind, OutboxMessage
from models.publishing import publish_after_commit
from models.task import AT_VENDOR, NOT_SUBMITTED, ExternalTask
from service.incidents import IncidentKind, open_incident
from service.vendor_events import EventResult, receive_event
from webhooks.events import VendorEvent


@dataclass(frozen=True)
class QuietTask:
    task_id: int
    correlation_id: str
    vendor_job_id: str
    traceparent: str | None = None  # the task's: asking the vendor about it continues its trace


def quiet_query(provider: str, quiet_s: int, now: datetime, batch: int) -> Select:
    return (
        select(ExternalTask)
        .options(
            load_only(
                ExternalTask.id,
                ExternalTask.correlation_id,
                ExternalTask.vendor_job_id,
                ExternalTask.checked_at,
                ExternalTask.traceparent,
            )
        )
        .where(
            text(AT_VENDOR),
            ExternalTask.provider == provider,
            ExternalTask.checked_at <= now - timedelta(seconds=quiet_s),
        )
        .order_by(ExternalTask.checked_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


def claim_quiet(session: Session, provider: str, quiet_s: int, now: datetime, batch: int) -> list[QuietTask]:
    """Tasks at the vendor with no news for ``quiet_s``, oldest first; claimed by moving checked_at."""
    tasks = session.scalars(quiet_query(provider, quiet_s, now, batch)).all()
    for task in tasks:
        task.checked_at = now
    return [QuietTask(t.id, t.correlation_id, t.vendor_job_id, t.traceparent) for t in tasks if t.vendor_job_id]


def claim_unsubmitted(session: Session, quiet_s: int, now: datetime, batch: int) -> list[OutboxMessage]:
    """Tasks stuck in ``requested``: their submit rows, published again after commit (consumers are idempotent)."""
    tasks = session.scalars(
        select(ExternalTask)
        .options(load_only(ExternalTask.id, ExternalTask.checked_at))
        .where(
            text(NOT_SUBMITTED),
            ExternalTask.checked_at <= now - timedelta(seconds=quiet_s),
            ExternalTask.dispatched_at.is_not(None),  # a queued task waits for its turn, not stuck
        )
        .order_by(ExternalTask.checked_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    for task in tasks:
        task.checked_at = now
    if not tasks:
        return []
    rows = list(
        session.scalars(
            select(OutboxMessage)
            .options(load_only(*PUBLISH_COLUMNS))
            .where(
                OutboxMessage.task_id.in_([t.id for t in tasks]),
                OutboxMessage.kind == OutboxKind.SUBMIT,
                OutboxMessage.done_at.is_(None),
                OutboxMessage.parked_reason.is_(None),
                OutboxMessage.next_attempt_at.is_(None),  # a scheduled retry is not stuck
            )
        )
    )
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
