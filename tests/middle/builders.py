"""Rows for the middle-layer tests, at a fixed clock: the functions under test take ``now``, so their
effects are exact. Most are built through the service itself; the store's contract tests, which drive
the statements beneath the service, write theirs by hand (``add_client``, ``add_task``,
``add_outbox_row``): only the columns a test names, the rest the tables' defaults."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.client import Client
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask, TaskEvent
from service.credentials import create_client
from service.intake import SubmitRequest, SubmitResult, submit_task
from service.vendor_events import record_submission

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PROVIDER = "sim"


def new_client(
    session: Session, name: str | None = None, callback_url: str | None = "https://shop.example/cb"
) -> Client:
    client, _, _ = create_client(session, name or f"client-{uuid.uuid4().hex[:8]}", callback_url, now=NOW)
    return client


def request(
    correlation_id: str | None = None,
    *,
    fingerprint: str = "fp-1",
    acceptance_deadline: datetime | None = None,
    execution_deadline: datetime | None = None,
    on_deadline: str = "escalate",
    provider: str = PROVIDER,
    heartbeat_timeout_s: int | None = None,
    priority: int | None = None,
    concurrency_key: str | None = None,
) -> SubmitRequest:
    return SubmitRequest(
        input={"sku": "A1"},
        correlation_id=correlation_id,
        provider=provider,
        callback_url=None,
        acceptance_deadline=acceptance_deadline,
        execution_deadline=execution_deadline,
        on_deadline=on_deadline,
        fingerprint=fingerprint,
        heartbeat_timeout_s=heartbeat_timeout_s,
        priority=priority,
        concurrency_key=concurrency_key,
    )


def submit(
    session: Session,
    client: Client,
    correlation_id: str | None = None,
    *,
    key: str | None = None,
    now: datetime = NOW,
    **kwargs: Any,
) -> SubmitResult:
    return submit_task(session, client, request(correlation_id, **kwargs), key, now)


def at_vendor(
    session: Session, client: Client, correlation_id: str, job_id: str | None = None, now: datetime = NOW, **kwargs: Any
) -> ExternalTask:
    """A task the vendor took (state ``submitted``, its submit row done)."""
    result = submit(session, client, correlation_id, now=now, **kwargs)
    record_submission(session, result.outbox[0], job_id or f"job-{correlation_id}", now)
    return result.task


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def outbox_rows(session: Session, task: ExternalTask) -> list[OutboxMessage]:
    return list(
        session.scalars(select(OutboxMessage).where(OutboxMessage.task_id == task.id).order_by(OutboxMessage.id))
    )


def timeline(session: Session, task: ExternalTask) -> list[str]:
    return list(session.scalars(select(TaskEvent.kind).where(TaskEvent.task_id == task.id).order_by(TaskEvent.id)))


# --- rows by hand, for the store's contract tests --------------------------------------------------


def uid() -> str:
    """A short unique name part: the module's database is shared by its tests, so rows are told apart."""
    return uuid.uuid4().hex[:12]


def add_client(session: Session, *, callback_url: str = "https://a.example/cb", **columns: Any) -> Client:
    """A client row (flushed: it has its id), a unique name unless given, one callback secret."""
    client = Client(**{"name": f"c-{uid()}", "callback_secrets": ["s"], "callback_url": callback_url, **columns})
    session.add(client)
    session.flush()
    return client


def add_task(session: Session, client: Client | int | None = None, **columns: Any) -> ExternalTask:
    """A task row of ``client`` (a client or its id; None: a new client), flushed: a unique
    correlation id, provider ``sim`` and an empty input unless ``columns`` say otherwise."""
    if client is None:
        client = add_client(session)
    client_id = client if isinstance(client, int) else client.id
    task = ExternalTask(
        client_id=client_id, **{"correlation_id": f"t-{uid()}", "provider": PROVIDER, "input": {}, **columns}
    )
    session.add(task)
    session.flush()
    return task


def add_outbox_row(session: Session, task: ExternalTask, kind: str = OutboxKind.RELAY, **columns: Any) -> OutboxMessage:
    """An outbox row of ``task`` (a relay unless ``kind`` says otherwise), flushed: a unique message
    id, an empty payload, created at ``NOW`` unless ``columns`` say otherwise."""
    row = OutboxMessage(
        kind=kind,
        task_id=task.id,
        correlation_id=task.correlation_id,
        **{"message_id": f"msg_{uuid.uuid4().hex}", "payload": {}, "created_at": NOW, **columns},
    )
    session.add(row)
    session.flush()
    return row
