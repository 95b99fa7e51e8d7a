"""The operators' lists, filtered and paged, shared by the admin API, the CLI, the console and the
task API (filters as plain data): dead letters, incidents, orphan events, disabled endpoints, tasks
(newest, across clients, retrying), one task's timeline, outbox rows, dead letters and incidents;
and what counts as retrying (``retrying_task_ids``, ``failing_callbacks``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import CompoundSelect, Select, select, union
from sqlalchemy.orm import Session, defer, joinedload

from core.states import TERMINAL
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.messages import DeadLetter, OutboxKind, OutboxMessage
from models.task import ExternalTask, TaskEvent


@dataclass(frozen=True)
class DeadLetterFilter:
    state: str | None = "open"  # open | replayed | discarded | None for all
    kind: str | None = None  # submit | relay | cancel | poison
    fault: str | None = None  # caller | system
    provider: str | None = None
    older_than_s: int | None = None
    newer_than_s: int | None = None

    def apply(self, query: Select, now: datetime) -> Select:
        for column, value in (
            (DeadLetter.state, self.state),
            (DeadLetter.kind, self.kind),
            (DeadLetter.fault, self.fault),
            (DeadLetter.provider, self.provider),
        ):
            if value is not None:
                query = query.where(column == value)
        if self.older_than_s is not None:
            query = query.where(DeadLetter.last_failed_at <= now - timedelta(seconds=self.older_than_s))
        if self.newer_than_s is not None:
            query = query.where(DeadLetter.last_failed_at >= now - timedelta(seconds=self.newer_than_s))
        return query


def dead_letters(
    session: Session, flt: DeadLetterFilter, now: datetime, limit: int, after_id: int | None = None
) -> list[DeadLetter]:
    query = flt.apply(select(DeadLetter), now)
    if after_id is not None:
        query = query.where(DeadLetter.id > after_id)
    return list(session.scalars(query.order_by(DeadLetter.id).limit(limit)))


def dead_letter(session: Session, letter_id: int) -> DeadLetter | None:
    return session.get(DeadLetter, letter_id)


def incidents(
    session: Session, state: str, kind: str | None, limit: int, after_id: int | None = None
) -> list[Incident]:
    query = select(Incident)
    if state == "open":
        query = query.where(Incident.resolved_at.is_(None))
    elif state == "resolved":
        query = query.where(Incident.resolved_at.is_not(None))
    if kind:
        query = query.where(Incident.kind == kind)
    if after_id is not None:
        query = query.where(Incident.id > after_id)
    return list(session.scalars(query.order_by(Incident.id).limit(limit)))


def orphans(session: Session, state: str | None, limit: int, after_id: int | None = None) -> list[OrphanEvent]:
    query = select(OrphanEvent)
    if state:
        query = query.where(OrphanEvent.state == state)
    if after_id is not None:
        query = query.where(OrphanEvent.id > after_id)
    return list(session.scalars(query.order_by(OrphanEvent.id).limit(limit)))


def retrying_tasks(session: Session, limit: int, after_id: int | None = None) -> list[ExternalTask]:
    """Tasks retrying right now, as the console counts them (:func:`retrying_task_ids`): a vendor call
    with another attempt scheduled, or a callback failing, final tasks included."""
    query = (
        select(ExternalTask).options(joinedload(ExternalTask.client)).where(ExternalTask.id.in_(retrying_task_ids()))
    )
    if after_id is not None:
        query = query.where(ExternalTask.id > after_id)
    return list(session.scalars(query.order_by(ExternalTask.id).limit(limit)))


def disabled_endpoints(session: Session) -> list[CallbackEndpoint]:
    """Disabled endpoints with their client (each is one client's: see ``service.dead_letters``)."""
    return list(
        session.scalars(
            select(CallbackEndpoint)
            .where(CallbackEndpoint.disabled_at.is_not(None))
            .options(joinedload(CallbackEndpoint.client))
            .order_by(CallbackEndpoint.id)
        )
    )


def task_events(session: Session, task_id: int, limit: int, after_id: int | None = None) -> list[TaskEvent]:
    """One task's timeline, oldest first: at most ``limit`` events, those after the event
    ``after_id`` (a page's cursor). One statement, on the index of ``task_id``; a task's timeline
    has no bound of its own (a vendor may send 50,000 progress events), so its reader takes a page."""
    query = select(TaskEvent).where(TaskEvent.task_id == task_id)
    if after_id is not None:
        query = query.where(TaskEvent.id > after_id)
    return list(session.scalars(query.order_by(TaskEvent.id).limit(limit)))


def newest_tasks(
    session: Session,
    limit: int,
    *,
    client_id: int | None = None,
    state: str | None = None,
    before_id: int | None = None,
    with_client: bool = False,
) -> list[ExternalTask]:
    """Tasks newest first, of one client or all, in one state or any, before the cursor
    ``before_id``; ``with_client`` loads each task's client with it."""
    query = select(ExternalTask)
    if client_id is not None:
        query = query.where(ExternalTask.client_id == client_id)
    if state is not None:
        query = query.where(ExternalTask.state == state)
    if before_id is not None:
        query = query.where(ExternalTask.id < before_id)
    if with_client:
        query = query.options(joinedload(ExternalTask.client))
    return list(session.scalars(query.order_by(ExternalTask.id.desc()).limit(limit)))


#: the outbox rows that are a task's callbacks: HTTP relays and broker channel events
CALLBACK_KINDS = (OutboxKind.RELAY, OutboxKind.CHANNEL)


def failing_callbacks() -> Select:
    """The task ids of callbacks that failed an attempt and have the next one scheduled: not done,
    not held for an earlier one (``parked_reason``), not merely waiting their turn (no attempt
    made). Read on the outbox's pending index, like its backlog."""
    return select(OutboxMessage.task_id).where(
        OutboxMessage.done_at.is_(None),
        OutboxMessage.next_attempt_at.is_not(None),
        OutboxMessage.parked_reason.is_(None),
        OutboxMessage.attempts > 0,
        OutboxMessage.kind.in_(CALLBACK_KINDS),
        OutboxMessage.task_id.is_not(None),
    )


def retrying_task_ids() -> CompoundSelect:
    """Tasks retrying right now, as the console counts them: an open task with a failed attempt and
    another scheduled (its submit, its cancel), or any task, final ones included, whose callback is
    failing (a succeeded task whose domain app does not answer is retrying its callback)."""
    open_retrying = select(ExternalTask.id).where(
        ExternalTask.next_attempt_at.is_not(None), ExternalTask.state.not_in([s.value for s in TERMINAL])
    )
    return union(open_retrying, failing_callbacks())


def callbacks_failing_of(session: Session, task_ids: list[int]) -> set[int]:
    """Which of these tasks have a failing callback (``failing_callbacks``)."""
    if not task_ids:
        return set()
    return set(session.scalars(failing_callbacks().where(OutboxMessage.task_id.in_(task_ids)).distinct()))


@dataclass(frozen=True)
class TaskFilter:
    """The operators' task list: any of these, newest first (the console's filters)."""

    state: str | None = None
    provider: str | None = None
    client_id: int | None = None
    retrying: bool = False  # retrying_task_ids(): failing callbacks included
    correlation_id: str | None = None  # exact: the (correlation_id, client_id) unique index leads with it


def operator_tasks(session: Session, flt: TaskFilter, limit: int, before_id: int | None = None) -> list[ExternalTask]:
    """One page of tasks across clients, newest first, after the cursor ``before_id``. Neither the
    input nor the outcome is loaded (either may be 64 KiB)."""
    query = select(ExternalTask).options(
        joinedload(ExternalTask.client), defer(ExternalTask.input), defer(ExternalTask.outcome)
    )
    if flt.state is not None:
        query = query.where(ExternalTask.state == flt.state)
    if flt.provider is not None:
        query = query.where(ExternalTask.provider == flt.provider)
    if flt.client_id is not None:
        query = query.where(ExternalTask.client_id == flt.client_id)
    if flt.correlation_id is not None:
        query = query.where(ExternalTask.correlation_id == flt.correlation_id)
    if flt.retrying:
        query = query.where(ExternalTask.id.in_(retrying_task_ids()))
    if before_id is not None:
        query = query.where(ExternalTask.id < before_id)
    return list(session.scalars(query.order_by(ExternalTask.id.desc()).limit(limit)))


def task_dead_letters(session: Session, task_id: int) -> list[DeadLetter]:
    """The dead letters of one task's outbox rows (submit, relay, cancel, or poison), oldest first."""
    outbox_ids = select(OutboxMessage.id).where(OutboxMessage.task_id == task_id).scalar_subquery()
    return list(session.scalars(select(DeadLetter).where(DeadLetter.outbox_id.in_(outbox_ids)).order_by(DeadLetter.id)))


def task_outbox(session: Session, task_id: int) -> list[OutboxMessage]:
    """One task's outbox rows (its submit, relays, cancel) without their payloads."""
    return list(
        session.scalars(
            select(OutboxMessage)
            .options(defer(OutboxMessage.payload))
            .where(OutboxMessage.task_id == task_id)
            .order_by(OutboxMessage.id)
        )
    )


def task_incidents(session: Session, task: ExternalTask, outbox_ids: list[int]) -> list[Incident]:
    """Incidents about one task: those of its outbox rows and its deadlines (incidents name a task
    by its id or its outbox rows', never by correlation id alone, which is per client)."""
    subjects = [f"outbox:{i}" for i in outbox_ids] + [f"{rule}:task:{task.id}" for rule in ("acceptance", "execution")]
    return list(
        session.scalars(
            select(Incident)
            .where(Incident.correlation_id == task.correlation_id, Incident.subject.in_(subjects))
            .order_by(Incident.id)
        )
    )
