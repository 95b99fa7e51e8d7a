"""What the console's task page reads: the task without its input or outcome, its newest timeline
events, its outbox rows, dead letters and incidents, whether its callback endpoint is paused, and
its input and outcome as the text they are stored as (the page decodes them itself, within the
depth limit, and a failed task's reason with them: decoding is the view's, ``app.console.task_views``);
where its callbacks go, which of its calls are retrying, and whose error its last error is (a
vendor's or its callback's). And a task found by its correlation id. Kept here so the console's
views build no query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from core.urls import strip_url
from models.attention import Incident
from models.endpoint_health import EndpointHealth
from models.messages import DeadLetter, OutboxKind, OutboxMessage
from models.read_models import lists
from models.read_models.console_pages import stored_text
from models.store import store_of
from models.task import ExternalTask, TaskEvent

#: the timeline events that set a task's ``last_error`` (``service.transitions.record_attempt_failure``,
#: ``service.dead_letters.dead_letter``), each named ``<outbox kind>.<what>``
ERROR_EVENTS = tuple(f"{kind}.{what}" for kind in OutboxKind.ALL for what in ("attempt_failed", "dead_lettered"))


@dataclass(frozen=True)
class CallbackTarget:
    """Where a task's callbacks go: ``url`` stripped of its secrets, from the task (``source``
    "task") or its client's default ("client"; the relay reads it at delivery), or none; and the
    broker channel it copied from its client at submit, if any."""

    url: str | None
    source: str | None
    channel: str | None


def callback_target(task_url: str | None, client_url: str | None, channel: str | None) -> CallbackTarget:
    if task_url:
        return CallbackTarget(strip_url(task_url), "task", channel)
    if client_url:
        return CallbackTarget(strip_url(client_url), "client", channel)
    return CallbackTarget(None, None, channel)


def is_failing(row: OutboxMessage) -> bool:
    """A row that failed an attempt and has the next one scheduled (``lists.failing_callbacks``
    says the same in SQL for callbacks)."""
    return row.done_at is None and row.next_attempt_at is not None and row.parked_reason is None and row.attempts > 0


def error_source(kind: str | None) -> str | None:
    """Whose error a task's last error is, from the outbox kind that set it: its callback's (an HTTP
    relay or a channel event) or the vendor's (submit, cancel, a status probe)."""
    if kind is None:
        return None
    return "callback" if kind in lists.CALLBACK_KINDS else "vendor"


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
    callbacks: CallbackTarget
    retrying: list[OutboxMessage]  # its vendor calls failing (submit, cancel, probe), oldest first
    callbacks_retrying: list[OutboxMessage]  # its callbacks failing, oldest first
    error_source: str | None  # "vendor" or "callback": whose error ``task.last_error`` is


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
    return [d for d in lists.task_dead_letters(session, task_id) if d.state == "open"]


def last_error_kind(session: Session, task_id: int) -> str | None:
    """The outbox kind of the task's newest failure on its timeline: what set its ``last_error``."""
    kind = session.scalar(
        select(TaskEvent.kind)
        .where(TaskEvent.task_id == task_id, TaskEvent.kind.in_(ERROR_EVENTS))
        .order_by(TaskEvent.id.desc())
        .limit(1)
    )
    return kind.split(".", 1)[0] if kind else None


def tasks_named(session: Session, correlation_id: str, client_id: int | None, limit: int) -> list[ExternalTask]:
    """The tasks with this correlation id, newest first: of one client (at most one), or of every
    client that used the name (correlation ids are each client's own)."""
    flt = lists.TaskFilter(correlation_id=correlation_id, client_id=client_id)
    return lists.operator_tasks(session, flt, limit)


def task_page(session: Session, task_id: int, now: datetime, timeline_limit: int) -> TaskPage | None:
    """Everything the task's page shows, or None when there is no such task."""
    task = task_without_json(session, task_id)
    if task is None:
        return None
    events, total_events = timeline(session, task_id, timeline_limit)
    outbox = lists.task_outbox(session, task_id)
    letters = lists.task_dead_letters(session, task_id)
    incidents = lists.task_incidents(session, task, [row.id for row in outbox])
    paused = store_of(session).endpoint_health.paused_endpoint(
        session, task.client_id, task.callback_url or task.client.callback_url, now
    )
    failing = [row for row in outbox if is_failing(row)]
    outcome_text = stored_text(session, ExternalTask.outcome, ExternalTask.id, task_id)
    return TaskPage(
        task=task,
        events=events,
        total_events=total_events,
        outbox=outbox,
        letters=letters,
        incidents=incidents,
        paused=paused,
        input_text=stored_text(session, ExternalTask.input, ExternalTask.id, task_id),
        outcome_text=outcome_text,
        callbacks=callback_target(task.callback_url, task.client.callback_url, task.channel),
        retrying=[row for row in failing if row.kind not in lists.CALLBACK_KINDS],
        callbacks_retrying=[row for row in failing if row.kind in lists.CALLBACK_KINDS],
        error_source=error_source(last_error_kind(session, task_id)) if task.last_error else None,
    )
