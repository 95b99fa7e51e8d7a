"""What the operator console's overview reads: is work flowing, and what needs a person?

Everything here reads few rows, so the page stays fast with millions of tasks. The one count that
would read every task — finished tasks by state and provider — is, on PostgreSQL with a large
table, the planner's estimate (``EXPLAIN``, helped by the (state, provider) statistics of migration
0009), and flagged as such: the page says "≈". Open tasks, retries, the outbox, dead letters,
incidents and orphans are exact counts on partial or leading indexes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from core.states import TERMINAL, State
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.endpoint_health import EndpointHealth
from models.messages import DeadLetter, OutboxMessage
from models.read_models.lists import retrying_task_ids
from models.store import store_of
from models.task import ExternalTask, TaskEvent

#: Below this many tasks (the planner's own estimate of the table) finished tasks are counted exactly.
ESTIMATE_ABOVE_ROWS = 200_000
OPEN_STATES = tuple(s.value for s in State if s not in TERMINAL)
FINISHED_STATES = tuple(s.value for s in State if s in TERMINAL)
#: the chart's series: the timeline event of a task reaching each final state it shows
CHART_EVENTS = {"state.succeeded": "succeeded", "state.failed": "failed"}


@dataclass(frozen=True)
class Count:
    value: int
    estimated: bool = False


@dataclass
class TaskCounts:
    """Tasks by (state, provider); ``estimated`` says which counts are the planner's estimate."""

    cells: dict[tuple[str, str], Count] = field(default_factory=dict)
    estimated: bool = False

    def get(self, state: str, provider: str) -> Count:
        return self.cells.get((state, provider), Count(0))


def _counted(session: Session, states: Iterable[str]) -> dict[tuple[str, str], Count]:
    """The tasks in ``states`` counted exactly, by state and provider."""
    rows = session.execute(
        select(ExternalTask.state, ExternalTask.provider, func.count())
        .where(ExternalTask.state.in_(states))
        .group_by(ExternalTask.state, ExternalTask.provider)
    ).all()
    return {(state, provider): Count(n) for state, provider, n in rows}


def task_counts(session: Session, providers: Iterable[str], estimate_above: int = ESTIMATE_ABOVE_ROWS) -> TaskCounts:
    providers = sorted(set(providers))
    counts = TaskCounts()
    counts.cells.update(_counted(session, OPEN_STATES))
    if _table_estimate(session, "external_tasks") < estimate_above:
        counts.cells.update(_counted(session, FINISHED_STATES))
        return counts
    counts.estimated = True
    for state in FINISHED_STATES:
        for provider in providers:
            counts.cells[(state, provider)] = Count(_planner_rows(session, state, provider), estimated=True)
    return counts


def _table_estimate(session: Session, table: str) -> int:
    """PostgreSQL's own idea of a table's size (``pg_class.reltuples``, kept by ANALYZE and
    autovacuum); 0 elsewhere, where every count is exact."""
    return store_of(session).reads.table_estimate(session, table)


#: the rows the planner estimates for each finished (state, provider) cell
_CELL = "SELECT 1 FROM external_tasks WHERE state = :state AND provider = :provider"


def _planner_rows(session: Session, state: str, provider: str) -> int:
    """How many tasks the planner expects in (state, provider), without reading them."""
    return store_of(session).reads.expected_rows(session, _CELL, {"state": state, "provider": provider})


@dataclass(frozen=True)
class OutboxBacklog:
    kind: str
    pending: int
    oldest: datetime | None


def outbox_backlog(session: Session) -> list[OutboxBacklog]:
    rows = session.execute(
        select(OutboxMessage.kind, func.count(), func.min(OutboxMessage.created_at))
        .where(OutboxMessage.done_at.is_(None))
        .group_by(OutboxMessage.kind)
        .order_by(OutboxMessage.kind)
    ).all()
    return [OutboxBacklog(kind, n, oldest) for kind, n, oldest in rows]


def retrying_count(session: Session) -> int:
    """Tasks retrying now (``models.read_models.lists.retrying_task_ids``): vendor calls and failing callbacks."""
    return session.scalar(select(func.count()).select_from(retrying_task_ids().subquery())) or 0


def open_dead_letters(session: Session) -> dict[tuple[str, str], int]:
    rows = session.execute(
        select(DeadLetter.kind, DeadLetter.fault, func.count())
        .where(DeadLetter.state == "open")
        .group_by(DeadLetter.kind, DeadLetter.fault)
    ).all()
    return {(kind, fault): n for kind, fault, n in rows}


def open_incidents(session: Session) -> dict[str, int]:
    rows = session.execute(
        select(Incident.kind, func.count()).where(Incident.resolved_at.is_(None)).group_by(Incident.kind)
    ).all()
    return {str(kind): int(n) for kind, n in rows}


def open_orphans(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(OrphanEvent).where(text("state = 'open'"))) or 0


def paused_endpoints(session: Session) -> int:
    """Client callback origins paused after failing (they resume by themselves)."""
    return (
        session.scalar(select(func.count()).select_from(EndpointHealth).where(EndpointHealth.paused_until.is_not(None)))
        or 0
    )


def disabled_endpoints(session: Session) -> int:
    return (
        session.scalar(
            select(func.count()).select_from(CallbackEndpoint).where(CallbackEndpoint.disabled_at.is_not(None))
        )
        or 0
    )


@dataclass(frozen=True)
class Minute:
    start: datetime
    succeeded: int = 0
    failed: int = 0


def finished_per_minute(session: Session, now: datetime, minutes: int = 60) -> list[Minute]:
    """Tasks that reached succeeded or failed in each of the last ``minutes`` minutes (oldest
    first, the current minute last), from their timeline events on a partial index."""
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    bucket = store_of(session).reads.minute(TaskEvent.at)
    rows = session.execute(
        select(bucket, TaskEvent.kind, func.count())
        .where(text("kind IN ('state.succeeded', 'state.failed')"), TaskEvent.at >= start)
        .group_by(bucket, TaskEvent.kind)
    ).all()
    counts: dict[tuple[int, str], int] = {}
    for at, kind, n in rows:
        moment = at if isinstance(at, datetime) else datetime.fromisoformat(str(at)).replace(tzinfo=start.tzinfo)
        index = int((moment.replace(tzinfo=start.tzinfo) - start).total_seconds() // 60)
        if 0 <= index < minutes:
            counts[(index, CHART_EVENTS[kind])] = counts.get((index, CHART_EVENTS[kind]), 0) + n
    return [
        Minute(start + timedelta(minutes=i), counts.get((i, "succeeded"), 0), counts.get((i, "failed"), 0))
        for i in range(minutes)
    ]


#: a message published this long ago and still not finished, with no other finished since, says
#: no worker is taking work (every call's own deadline is far shorter: ``docs/settings.md``)
WORKERS_QUIET_AFTER_S = 300.0


@dataclass(frozen=True)
class WorkerActivity:
    """What the database says of the workers, without asking the broker: when a worker last finished
    an outbox message, and how long the oldest published message has waited unfinished. Workers
    that have nothing to do finish nothing, so quiet alone is no alarm; quiet while work waits is."""

    last_done_at: datetime | None
    oldest_waiting_since: datetime | None

    def waiting_s(self, now: datetime) -> float | None:
        if self.oldest_waiting_since is None:
            return None
        return max((now - self.oldest_waiting_since).total_seconds(), 0.0)

    def since_done_s(self, now: datetime) -> float | None:
        return None if self.last_done_at is None else max((now - self.last_done_at).total_seconds(), 0.0)

    def stalled(self, now: datetime) -> bool:
        """Work has waited past WORKERS_QUIET_AFTER_S, and nothing finished in that time."""
        waiting, since_done = self.waiting_s(now), self.since_done_s(now)
        if waiting is None or waiting <= WORKERS_QUIET_AFTER_S:
            return False
        return since_done is None or since_done > WORKERS_QUIET_AFTER_S


def worker_activity(session: Session, now: datetime) -> WorkerActivity:
    """Two index reads (``ix_outbox_messages_pending``): the newest ``done_at``, and the oldest
    ``dispatched_at`` of a message out at the broker and due (not parked, not held for later)."""
    last_done = session.scalar(select(func.max(OutboxMessage.done_at)))
    waiting = session.scalar(
        select(func.min(OutboxMessage.dispatched_at)).where(
            OutboxMessage.done_at.is_(None),
            OutboxMessage.dispatched_at.is_not(None),
            OutboxMessage.parked_reason.is_(None),
            (OutboxMessage.next_attempt_at.is_(None)) | (OutboxMessage.next_attempt_at <= now),
        )
    )
    return WorkerActivity(last_done, waiting)
