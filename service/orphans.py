"""Orphan events (a vendor event for a job no task knows yet): flag the ones left unbound too long,
attach one to a task by hand, or discard it."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from models.attention import OrphanEvent
from models.messages import OutboxMessage
from models.task import ExternalTask
from service.dead_letters import NotReplayable
from service.incidents import IncidentKind, open_incident, resolve_open
from service.outbox_rows import add_event
from service.vendor_events import bind_orphans


def flag_stale_orphans(session: Session, now: datetime, window_s: int, batch: int) -> int:
    """Open an incident for each orphan unbound past the window. The event's type is read in SQL
    (``payload->>'type'``): the payload holds the vendor's outcome, which is not loaded."""
    found = session.execute(
        select(OrphanEvent.id, OrphanEvent.source, OrphanEvent.vendor_job_id, OrphanEvent.payload["type"].as_string())
        .where(
            text("state = 'open' AND flagged_at IS NULL"), OrphanEvent.received_at <= now - timedelta(seconds=window_s)
        )
        .order_by(OrphanEvent.received_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    ).all()
    for orphan_id, source, job_id, event_type in found:
        session.execute(update(OrphanEvent).where(OrphanEvent.id == orphan_id).values(flagged_at=now))
        open_incident(
            session,
            IncidentKind.ORPHAN_UNBOUND,
            f"orphan:{orphan_id}",
            f"{event_type} from {source} for unknown job {job_id}",
            now,
        )
    return len(found)


def attach_orphan(
    session: Session, orphan: OrphanEvent, task: ExternalTask, now: datetime, by: str | None = None
) -> list[OutboxMessage]:
    """An operator says which task an orphan belongs to: bind it (and its job's other orphans), apply."""
    if orphan.state != "open":
        raise NotReplayable(f"orphan {orphan.id} is {orphan.state}")
    if task.provider != orphan.source:
        raise NotReplayable(f"orphan came from {orphan.source}, the task runs at {task.provider}")
    if task.vendor_job_id not in (None, orphan.vendor_job_id):
        raise NotReplayable("the task is bound to another vendor job")
    task.vendor_job_id = orphan.vendor_job_id
    add_event(session, task, "orphan.attached", now, orphan_id=orphan.id, **({"by": by} if by else {}))
    return bind_orphans(session, task, now)  # resolves the orphans' incidents too


def discard_orphan(session: Session, orphan: OrphanEvent, now: datetime) -> None:
    if orphan.state != "open":
        raise NotReplayable(f"orphan {orphan.id} is {orphan.state}")
    orphan.state, orphan.resolved_at = "discarded", now
    resolve_open(session, IncidentKind.ORPHAN_UNBOUND, f"orphan:{orphan.id}", now, "discarded")
