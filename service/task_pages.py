"""What the console's task page reads: the task without its input or outcome, its newest timeline
events, its outbox rows, dead letters and incidents, whether its callback endpoint is paused, and
its input and outcome as the text they are stored as (the page decodes them itself, within the
depth limit). Kept here so the console's views build no query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from models.attention import Incident
from models.endpoint_health import EndpointHealth, paused_endpoint
from models.messages import DeadLetter, OutboxMessage
from models.task import ExternalTask, TaskEvent
from service import queries
from service.console_reads import stored_text


@dataclass(frozen=True)
class TaskPage:
    """One task as its console page shows it (``input_text`` and ``outcome_text``: as stored)."""

    task: ExternalTask
    events: list[TaskEvent]
    total_events: int
    outbox: list[OutboxMessage]
    letters: list[DeadLetter]
    incidents: list[Incident]
    paused: EndpointHealth | None
    input_text: str | None
    outcome_text: str | None


def task_without_json(session: Session, task_id: int) -> ExternalTask | None:
    """The task, its input and outcome not loaded (either may be 64 KiB)."""
    return session.get(ExternalTask, task_id, options=[defer(ExternalTask.input), defer(ExternalTask.outcome)])


def timeline(session: Session, task_id: int, limit: int) -> tuple[list[TaskEvent], int]:
    """The task's newest ``limit`` events, oldest first, and how many it has in all (counted only
    when the limit is reached)."""
    events = list(
        session.scalars(
            select(TaskEvent).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id.desc()).limit(limit)
        )
    )[::-1]
    if len(events) < limit:
        return events, len(events)
    total = session.scalar(select(func.count()).select_from(TaskEvent).where(TaskEvent.task_id == task_id))
    return events, int(total or 0)


def open_task_dead_letters(session: Session, task_id: int) -> list[DeadLetter]:
    """The task's dead letters still open, oldest first: what its replay would replay."""
    return [d for d in queries.task_dead_letters(session, task_id) if d.state == "open"]


def task_page(session: Session, task_id: int, now: datetime, timeline_limit: int) -> TaskPage | None:
    """Everything the task's page shows, or None when there is no such task."""
    task = task_without_json(session, task_id)
    if task is None:
        return None
    events, total_events = timeline(session, task_id, timeline_limit)
    outbox = queries.task_outbox(session, task_id)
    letters = queries.task_dead_letters(session, task_id)
    incidents = queries.task_incidents(session, task, [row.id for row in outbox])
    paused = paused_endpoint(session, task.client_id, task.callback_url or task.client.callback_url, now)
    return TaskPage(
        task=task,
        events=events,
        total_events=total_events,
        outbox=outbox,
        letters=letters,
        incidents=incidents,
        paused=paused,
        input_text=stored_text(session, ExternalTask.input, ExternalTask.id, task_id),
        outcome_text=stored_text(session, ExternalTask.outcome, ExternalTask.id, task_id),
    )
