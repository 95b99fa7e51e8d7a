"""A task's submission: its idempotent record, its client's open-task cap, and its admission
(released to the broker now, or queued in the database: ``service.admission``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.states import State
from models.client import Client
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask, new_reference
from service import admission, dispatch
from service.errors import ServiceError
from service.outbox_rows import add_event, add_new_task, add_outbox


class IdempotencyConflict(ServiceError):
    """The Idempotency-Key was used before with a different body (→ 409)."""


class OpenTasksCapReached(Exception):
    """The client has as many non-final tasks as it may (→ 429 naming the cap)."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"this client has {cap} open tasks, its cap (max_open_tasks); submit again once some are final"
        )
        self.cap = cap


@dataclass(frozen=True)
class SubmitRequest:
    """A validated ``POST /api/v1/tasks`` body (see ``app.api.validation``)."""

    input: Any
    correlation_id: str | None
    provider: str
    callback_url: str | None
    acceptance_deadline: datetime | None
    execution_deadline: datetime | None
    on_deadline: str
    fingerprint: str
    #: no vendor event for this long asks the vendor (the task's own, or its provider's default)
    heartbeat_timeout_s: int | None = None
    #: 1 (most urgent) to 5; None: the client's default (core.fair_share)
    priority: int | None = None
    concurrency_key: str | None = None


@dataclass
class SubmitResult:
    task: ExternalTask
    created: bool
    outbox: list[OutboxMessage] = field(default_factory=list)


def find_task(session: Session, client: Client, correlation_id: str) -> ExternalTask | None:
    """The client's task with that correlation id. Correlation ids are unique per client only, so
    every lookup names the client: another tenant's task of the same name is never found."""
    return store_of(session).submissions.find(session, client.id, correlation_id)


def submit_task(
    session: Session,
    client: Client,
    req: SubmitRequest,
    idempotency_key: str | None,
    now: datetime,
    max_open_tasks: int | None = None,
    traceparent: str | None = None,
) -> SubmitResult:
    """Record a task and its ``submit`` outbox row, or return the task this request already made.

    A race between two identical requests ends at the unique constraints: on PostgreSQL the
    loser's insert does nothing and it answers with the winner's task (its look for an earlier
    request runs only then, or when the cap is reached); elsewhere the loser's commit raises
    IntegrityError, and the caller retries once, which then finds the winner's row here.
    A new task past ``max_open_tasks`` raises ``OpenTasksCapReached`` (a replay still answers); its
    open tasks are counted under the client's row lock (``service.admission``).
    ``traceparent`` (valid, or None) is kept with a new task: every span made for it continues it.
    """
    correlation_id = req.correlation_id or str(uuid.uuid4())
    # One query for both ways this request may have been made before: its Idempotency-Key, or its
    # correlation id (unique per client only: another client's task of that name is not ours).
    # On PostgreSQL it runs only when the insert found one (``service.outbox_rows.add_new_task``).
    params = {"client_id": client.id, "correlation_id": correlation_id, "key": idempotency_key}
    look_first = not store_of(session).outbox.new_task_reports_conflict
    if look_first and (earlier := _earlier(session, params, idempotency_key, req)) is not None:
        return earlier
    found = admission.load(session, req.provider, client.id, count_open=max_open_tasks is not None)
    if max_open_tasks is not None and found.open_tasks >= max_open_tasks:
        if not look_first and (earlier := _earlier(session, params, idempotency_key, req)) is not None:
            return earlier  # a replay still answers
        raise OpenTasksCapReached(max_open_tasks)

    task = ExternalTask(
        correlation_id=correlation_id,
        reference=new_reference(),
        client_id=client.id,
        provider=req.provider,
        state=State.REQUESTED.value,
        input=req.input,
        callback_url=req.callback_url,
        idempotency_key=idempotency_key,
        request_fingerprint=req.fingerprint,
        acceptance_deadline=req.acceptance_deadline,
        execution_deadline=req.execution_deadline,
        on_deadline=req.on_deadline,
        heartbeat_timeout_s=req.heartbeat_timeout_s,
        channel=client.channel,
        priority=req.priority or client.default_priority,
        concurrency_key=req.concurrency_key,
        traceparent=traceparent,
        created_at=now,
        updated_at=now,
        checked_at=now,
    )
    decision = admission.admit(session, task, client, now, found)  # released now, or queued in the database
    requested = ("requested", {"provider": req.provider})
    if decision.reason is None:
        row = add_new_task(session, task, now, requested)
        if row is None:  # PostgreSQL: a request made before holds the correlation id or the key
            earlier = _earlier(session, params, idempotency_key, req)
            if earlier is None:  # not ours to find (a clash of the random reference): the caller retries
                raise IntegrityError("INSERT INTO external_tasks", params, Exception("unique constraint"))
            return earlier
        admission.released(session, task, client)
        return SubmitResult(task, created=True, outbox=[row])
    if not look_first and (earlier := _earlier(session, params, idempotency_key, req)) is not None:
        return earlier
    session.add(task)
    session.flush()
    add_event(session, task, requested[0], now, **requested[1])
    queued = ("submit.queued", {"reason": decision.reason, "priority": task.priority})
    row = add_outbox(session, OutboxKind.SUBMIT, task, now, parked_reason=dispatch.QUEUED_ROW, event=queued)
    if decision.room:
        dispatch.release(session, task.provider, client.id, now)  # room behind older ones: a missed release
    return SubmitResult(task, created=True, outbox=[row])


def _earlier(
    session: Session, params: dict[str, Any], idempotency_key: str | None, req: SubmitRequest
) -> SubmitResult | None:
    """The task an earlier request made with this Idempotency-Key or correlation id, if any; a key
    used before with a different body raises :class:`IdempotencyConflict`."""
    earlier = store_of(session).submissions.earlier(
        session, params["client_id"], params["correlation_id"], idempotency_key
    )
    by_key = next((t for t in earlier if idempotency_key is not None and t.idempotency_key == idempotency_key), None)
    if by_key is not None:
        if by_key.request_fingerprint != req.fingerprint:
            raise IdempotencyConflict("Idempotency-Key was already used with a different body")
        return SubmitResult(by_key, created=False)
    if earlier:
        return SubmitResult(earlier[0], created=False)
    return None
