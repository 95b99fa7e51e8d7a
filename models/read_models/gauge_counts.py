"""What the business gauges count, read at scrape time (``app.observability.collectors``): a handful
of grouped COUNTs on indexed columns, on the connection the scrape opened. Only the rows that exist
come back; the collector fills in the zeros and turns them into metric families."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select, text

from models.attention import Incident, OrphanEvent
from models.client import Client
from models.endpoint_health import EndpointHealth
from models.messages import DeadLetter, OutboxMessage
from models.store import store_of_connection
from models.task import POLL_ARMED, QUEUED, ExternalTask


@dataclass(frozen=True)
class GaugeCounts:
    tasks: list[tuple[str, str, int]]  # state, provider, count
    dead_letters_open: list[tuple[str, str, int]]  # kind, fault, count
    incidents_open: list[tuple[str, int]]  # kind, count
    orphans_open: int
    outbox_pending: list[tuple[str, int, datetime | None]]  # kind, count, oldest created_at
    queued: list[tuple[str, str, int, datetime]]  # provider, client name, count, oldest created_at
    unhealthy: list[tuple[int, datetime | None, datetime | None]]  # failures, paused_until, probe_until
    #: provider, its earliest next poll (on ix_external_tasks_poll_due)
    poll_due: list[tuple[str, datetime]]


def limit_statements(conn: Connection, statement_timeout_ms: int) -> None:
    """On PostgreSQL, bound every statement of the connection's transaction: a slow scrape must not
    pile up on a struggling database."""
    store_of_connection(conn).reads.limit_statements(conn, statement_timeout_ms)


def read_counts(conn: Connection) -> GaugeCounts:
    tasks = conn.execute(
        select(ExternalTask.state, ExternalTask.provider, func.count()).group_by(
            ExternalTask.state, ExternalTask.provider
        )
    ).all()
    dead = conn.execute(
        select(DeadLetter.kind, DeadLetter.fault, func.count())
        .where(DeadLetter.state == "open")
        .group_by(DeadLetter.kind, DeadLetter.fault)
    ).all()
    incidents = conn.execute(
        select(Incident.kind, func.count()).where(Incident.resolved_at.is_(None)).group_by(Incident.kind)
    ).all()
    orphans = conn.scalar(select(func.count()).select_from(OrphanEvent).where(OrphanEvent.state == "open"))
    outbox = conn.execute(
        select(OutboxMessage.kind, func.count(), func.min(OutboxMessage.created_at))
        .where(OutboxMessage.done_at.is_(None))
        .group_by(OutboxMessage.kind)
    ).all()
    queued = conn.execute(
        select(ExternalTask.provider, Client.name, func.count(), func.min(ExternalTask.created_at))
        .join(Client, Client.id == ExternalTask.client_id)
        .where(text(QUEUED))
        .group_by(ExternalTask.provider, Client.name)
    ).all()
    unhealthy = conn.execute(
        select(EndpointHealth.failures, EndpointHealth.paused_until, EndpointHealth.probe_until).where(
            EndpointHealth.failures > 0
        )
    ).all()
    poll_due = conn.execute(
        select(ExternalTask.provider, func.min(ExternalTask.poll_due_at))
        .where(text(POLL_ARMED))
        .group_by(ExternalTask.provider)
    ).all()
    return GaugeCounts(
        tasks=[(state, provider, n) for state, provider, n in tasks],
        dead_letters_open=[(kind, fault, n) for kind, fault, n in dead],
        incidents_open=[(kind, n) for kind, n in incidents],
        orphans_open=orphans or 0,
        outbox_pending=[(kind, n, oldest) for kind, n, oldest in outbox],
        queued=[(provider, client, n, first) for provider, client, n, first in queued],
        unhealthy=[(failures, paused, probe) for failures, paused, probe in unhealthy],
        poll_due=[(provider, due) for provider, due in poll_due],
    )
