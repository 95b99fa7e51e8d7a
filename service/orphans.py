"""Orphan events (a vendor event for a job no task knows yet): flag the ones left unbound too long,
attach one to a task by hand, or discard it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from models.attention import OrphanEvent
from models.messages import OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service.dead_letters import NotReplayable
from service.incidents import IncidentKind, open_incident, resolve_open
from service.outbox_rows import add_event
from service.vendor_events import bind_orphans


def flag_stale_orphans(session: Session, now: datetime, window_s: int, batch: int) -> int:
    """Open an incident for each orphan unbound past the window. The event's type is read in SQL
    (``payload->>'type'``): the payload holds the vendor's outcome, which is not loaded."""
    attention = store_of(session).attention
    found = attention.stale_orphans(session, now, window_s, batch)
    attention.flag_orphans(session, [orphan_id for orphan_id, *_ in found], now)
    for orphan_id, source, job_id, event_type in found:
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
