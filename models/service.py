"""The writes that change a task's state: the one place that writes them.

Each function runs inside the caller's transaction and returns the outbox rows it wrote, so the
caller commits once and publishes after the commit. ``now`` is always passed in. Every state change
goes through :func:`core.states.transition` / :func:`core.states.decide`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, Table, Text, bindparam, cast, func, inspect, or_, select, update
from sqlalchemy.orm import Session, defer

from core.fair_share import RATE_LIMIT
from core.ordering import next_sequence
from core.states import COMPLETED_CALLBACK, RELAYED, TERMINAL, State, transition
from models import dispatch, ordering
from models.client import Client
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask, new_reference, record_event
from webhooks.bounded_json import JsonLimits, check_bounds, strict_loads
from webhooks.channel_messages import row_message_id


class ServiceError(Exception):
    """Root of the domain errors the API maps to 4xx responses."""


class IdempotencyConflict(ServiceError):
    """The Idempotency-Key was used before with a different body (→ 409)."""


#: Load a task without the caller's ``input`` (read only by the submit, through a guarded loader)
#: and, where noted, without the vendor's ``outcome``: both can be large, and rows stored before
#: their limits existed can be too deep to decode. A deferred column loads on first access.
WITHOUT_INPUT = (defer(ExternalTask.input),)
WITHOUT_PAYLOAD = (defer(ExternalTask.input), defer(ExternalTask.outcome))


class OpenTasksCapReached(Exception):
    """The client has as many non-final tasks as it may (→ 429 naming the cap)."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"this client has {cap} open tasks, its cap (max_open_tasks); submit again once some are final"
        )
        self.cap = cap


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


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


def add_event(session: Session, task: ExternalTask, kind: str, now: datetime, **detail: Any) -> None:
    record_event(session, task.id, kind, now, detail)


def add_outbox(
    session: Session, kind: str, task: ExternalTask, now: datetime, *, parked_reason: str | None = None, **payload: Any
) -> OutboxMessage:
    """``parked_reason``: the row waits unpublished until something releases it (a queued submission)."""
    row = OutboxMessage(
        message_id=payload.pop("message_id", None) or new_message_id(),
        kind=kind,
        task_id=task.id,
        correlation_id=task.correlation_id,
        sequence=payload.get("sequence"),
        payload=payload,
        created_at=now,
        parked_reason=parked_reason,
    )
    session.add(row)
    session.flush()
    return row


def add_relay(session: Session, task: ExternalTask, callback_type: str, now: datetime, **fields: Any) -> OutboxMessage:
    """Every callback of a task is written here, under the task's row lock: it takes the next
    number of the task's sequence (``core.ordering``) and carries the task's state at that point,
    so a domain app can discard anything older than what it holds. A completion after an earlier
    one (a replay reopened the task) names the one it ``supersedes``.

    The counter is a column of the task row the state change writes anyway: numbering costs no
    statement.

    A task of a client on a broker channel (``task.channel``) gets a second row, of kind
    ``channel``, with the same body and ``message_id`` (its own row id is derived from it:
    ``webhooks.channel_messages.row_message_id``) and no ``sequence`` column (that place is the
    HTTP relay's): the channel task publishes a task's rows in the order they were written.
    """
    task.relay_seq = next_sequence(task.relay_seq)
    message_id = new_message_id()
    supersedes = None
    if callback_type == COMPLETED_CALLBACK:
        supersedes, task.completion_message_id = task.completion_message_id, message_id
    relay = add_outbox(
        session,
        OutboxKind.RELAY,
        task,
        now,
        message_id=message_id,
        type=callback_type,
        correlation_id=task.correlation_id,
        sequence=task.relay_seq,
        state=task.state,
        supersedes=supersedes,
        occurred_at=now.isoformat(),
        **fields,
    )
    if task.channel is not None:
        add_channel_event(session, task.id, task.correlation_id, dict(relay.payload, message_id=message_id), now)
    return relay


def add_channel_event(
    session: Session, task_id: int | None, correlation_id: str | None, body: dict[str, Any], now: datetime
) -> OutboxMessage:
    """An event for the client's broker channel: ``body`` is what is signed and sent, its
    ``message_id`` the event's own (the HTTP callback's, for a task event)."""
    row = OutboxMessage(
        message_id=row_message_id(body["message_id"]),
        kind=OutboxKind.CHANNEL,
        task_id=task_id,
        correlation_id=correlation_id,
        payload=body,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def find_task(session: Session, client: Client, correlation_id: str) -> ExternalTask | None:
    """The client's task with that correlation id. Correlation ids are unique per client only, so
    every lookup names the client: another tenant's task of the same name is never found."""
    return session.scalar(
        select(ExternalTask).where(ExternalTask.client_id == client.id, ExternalTask.correlation_id == correlation_id)
    )


def submit_task(
    session: Session,
    client: Client,
    req: SubmitRequest,
    idempotency_key: str | None,
    now: datetime,
    max_open_tasks: int | None = None,
) -> SubmitResult:
    """Record a task and its ``submit`` outbox row, or return the task this request already made.

    A race between two identical requests ends at the unique constraints: the loser's commit raises
    IntegrityError, and the caller retries once, which then finds the winner's row here.
    A new task past ``max_open_tasks`` raises ``OpenTasksCapReached`` (a replay still answers).
    """
    correlation_id = req.correlation_id or str(uuid.uuid4())
    # One query for both ways this request may have been made before: its Idempotency-Key, or its
    # correlation id (unique per client only: another client's task of that name is not ours).
    params = {"client_id": client.id, "correlation_id": correlation_id, "key": idempotency_key}
    earlier = session.scalars(_earlier_statement(idempotency_key is not None), params).all()
    by_key = next((t for t in earlier if idempotency_key is not None and t.idempotency_key == idempotency_key), None)
    if by_key is not None:
        if by_key.request_fingerprint != req.fingerprint:
            raise IdempotencyConflict("Idempotency-Key was already used with a different body")
        return SubmitResult(by_key, created=False)
    if earlier:
        return SubmitResult(earlier[0], created=False)
    capped = max_open_tasks is not None
    if capped:
        lock_client(session, client)
    found = dispatch.load(session, req.provider, client.id, count_open=capped)
    if max_open_tasks is not None and found.open_tasks >= max_open_tasks:
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
        created_at=now,
        updated_at=now,
        checked_at=now,
    )
    admission = dispatch.admit(session, task, client, now, found)  # released now, or queued in the database
    session.add(task)
    session.flush()
    add_event(session, task, "requested", now, provider=req.provider)
    if admission.reason is None:
        return SubmitResult(task, created=True, outbox=[add_outbox(session, OutboxKind.SUBMIT, task, now)])
    add_event(session, task, "submit.queued", now, reason=admission.reason, priority=task.priority)
    row = add_outbox(session, OutboxKind.SUBMIT, task, now, parked_reason=dispatch.QUEUED_ROW)
    if admission.room:
        dispatch.release(session, task.provider, client.id, now)  # room behind older ones: a missed release
    return SubmitResult(task, created=True, outbox=[row])


@cache
def _earlier_statement(with_key: bool) -> Select[tuple[ExternalTask]]:
    """:func:`submit_task`'s look for an earlier request, built once per shape. Hot statements are
    built once and reused with bound parameters: building one (and its cache key) on every call
    costs more CPU than running it."""
    same = ExternalTask.correlation_id == bindparam("correlation_id")
    if with_key:
        same = or_(ExternalTask.idempotency_key == bindparam("key"), same)
    return select(ExternalTask).where(ExternalTask.client_id == bindparam("client_id"), same)


def lock_client(session: Session, client: Client) -> None:
    """Take the client's row lock before its open tasks are counted against its cap
    (``dispatch.load``, in a statement of its own after this one).

    The lock (``FOR NO KEY UPDATE`` on PostgreSQL; SQLite's writers are serialised already) makes a
    client's concurrent submits count one after another, so the cap is exact: two racing requests
    cannot both see ``cap - 1``. It costs nothing across clients, and task inserts (which only take
    ``KEY SHARE`` on the client) from other transactions do not wait on it. The count cannot go in
    the locking SELECT: it would read the snapshot taken before the lock was granted (PostgreSQL
    re-checks only the locked row), and miss the task the lock's previous holder just committed.
    """
    session.execute(_LOCK_CLIENT, {"client_id": client.id})


_LOCK_CLIENT = select(Client.id).where(Client.id == bindparam("client_id")).with_for_update(key_share=True)


def claim_outbox(session: Session, outbox_id: int) -> OutboxMessage | None:
    """Lock an outbox row for its consumer; None when it is gone or already done (idempotency)."""
    row = session.scalar(_claim_statement(), {"outbox_id": outbox_id})
    if row is None or row.done_at is not None:
        return None
    return row


def claim_outbox_and_task(
    session: Session, outbox_id: int, *, with_input: bool = False
) -> tuple[OutboxMessage, ExternalTask, str | None] | None:
    """:func:`claim_outbox` and :func:`lock_task` of its task in one statement (and the task's input
    as JSON text, for a submission: parse it with :func:`parse_stored_input`). Both rows are taken
    ``FOR NO KEY UPDATE``: consumers of one outbox row still exclude each other, and the task's
    writers each other, while inserts that merely reference either do not wait."""
    found = session.execute(_claim_with_task_statement(with_input), {"outbox_id": outbox_id}).first()
    if found is None or found[0].done_at is not None:
        return None
    raw = (found[2] if found[2] is not None else "null") if with_input else None
    return found[0], found[1], raw


@cache
def _claim_statement() -> Select[tuple[OutboxMessage]]:
    return select(OutboxMessage).where(OutboxMessage.id == bindparam("outbox_id")).with_for_update()


@cache
def _claim_with_task_statement(with_input: bool) -> Select[Any]:
    columns: list[Any] = [OutboxMessage, ExternalTask]
    if with_input:
        columns.append(cast(ExternalTask.input, Text))
    return (
        select(*columns)
        .join(ExternalTask, ExternalTask.id == OutboxMessage.task_id)
        .options(*WITHOUT_INPUT)
        .where(OutboxMessage.id == bindparam("outbox_id"))
        .with_for_update(of=[OutboxMessage, ExternalTask], key_share=True)
        .execution_options(populate_existing=True)
    )


def lock_task(session: Session, task_id: int) -> ExternalTask:
    """Events for one task apply serially: every writer takes the task's row lock first
    (``FOR NO KEY UPDATE``: writers exclude each other; inserts that merely reference the task don't wait).
    The row is re-read under the lock, even if this session loaded it before."""
    return session.scalars(_lock_task_statement(), {"task_id": task_id}).one()


@cache
def _lock_task_statement() -> Select[tuple[ExternalTask]]:
    return (
        select(ExternalTask)
        .options(*WITHOUT_INPUT)
        .where(ExternalTask.id == bindparam("task_id"))
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )


def parse_stored_input(raw: str, limits: JsonLimits) -> Any:
    """Rows stored before the limits existed may hold an input too deep for any JSON decoder
    (RecursionError wherever it is loaded): read as text, its depth is measured before parsing,
    and it is refused with TooDeep or TooLarge (both InvalidJson) instead.
    """
    value = strict_loads(raw, max_depth=limits.max_depth, what="the stored input")
    check_bounds(value, limits, "the stored input")
    return value


def move(session: Session, task: ExternalTask, target: State, now: datetime, **detail: Any) -> list[OutboxMessage]:
    """Apply a validated move and write the relay row the domain app must receive."""
    previous = task.state
    task.state = transition(task.state, target).value
    task.updated_at = task.checked_at = now
    if target in TERMINAL:
        task.next_attempt_at = None
    add_event(session, task, f"state.{target.value}", now, previous=previous, **detail)
    dispatch.moved(session, task, previous, target, now)  # room in its client's window, its vendor, its key
    callback_type = RELAYED.get(target)
    if callback_type is None:
        return []
    return [add_relay(session, task, callback_type, now, outcome=_relayed_outcome(task, target))]


def _relayed_outcome(task: ExternalTask, target: State) -> Any:
    """The outcome a relay carries. An acceptance has none of its own: only what its event brought
    (already set on the task). A task short of its final state has no stored outcome, so an unloaded
    one is not read: webhooks and reconciliation then load no outcome at all for ``accepted``."""
    if target is State.ACCEPTED and "outcome" in inspect(task).unloaded:
        return None
    return task.outcome


def note_rate_limited(session: Session, task_id: int, now: datetime) -> None:
    """A released submission waits for a slot of its vendor's rate limit: the task says so until it
    reaches the vendor (``record_submission`` clears it), and its timeline says so once per wait.
    One UPDATE; the event only when the UPDATE changed the task."""
    if session.execute(_NOTE_RATE_LIMITED, {"task_id": task_id}).first() is not None:
        record_event(session, task_id, "submit.rate_limited", now, {})


_TASKS = ExternalTask.__table__
assert isinstance(_TASKS, Table)
_NOTE_RATE_LIMITED = (
    update(_TASKS)
    .where(
        _TASKS.c.id == bindparam("task_id"),
        _TASKS.c.state == State.REQUESTED.value,
        or_(_TASKS.c.wait_reason.is_(None), _TASKS.c.wait_reason != RATE_LIMIT),
    )
    .values(wait_reason=RATE_LIMIT)
    .returning(_TASKS.c.id)
)


def record_attempt_failure(
    session: Session, outbox: OutboxMessage, error: str, next_attempt_at: datetime | None, now: datetime
) -> None:
    """One failed attempt, visible on the task's timeline with when the next one is due."""
    outbox.attempts += 1
    outbox.deliveries = 0  # this delivery finished normally: not a poison message
    outbox.next_attempt_at = next_attempt_at
    if outbox.task_id is None:
        return
    task = lock_task(session, outbox.task_id)
    task.attempts += outbox.kind == OutboxKind.SUBMIT
    task.last_error = error
    task.next_attempt_at = next_attempt_at
    add_event(
        session,
        task,
        f"{outbox.kind}.attempt_failed",
        now,
        attempt=outbox.attempts,
        error=error,
        next_attempt_at=next_attempt_at.isoformat() if next_attempt_at else None,
    )


def settle_retry(session: Session, task: ExternalTask, finished: OutboxMessage) -> None:
    """``finished`` no longer waits for another attempt (done, parked or dead-lettered).

    A task shows as retrying while any of its outbox rows waits for one, so its ``next_attempt_at``
    becomes the earliest of the others, and ``last_error`` goes once none is left: a relay that
    needed one retry must not leave its task looking like it is still retrying.
    """
    pending = session.scalar(
        select(func.min(OutboxMessage.next_attempt_at)).where(
            OutboxMessage.task_id == task.id,
            OutboxMessage.id != finished.id,
            OutboxMessage.done_at.is_(None),
            OutboxMessage.next_attempt_at.is_not(None),
            OutboxMessage.parked_reason.is_(None),  # a relay held for an earlier one is not retrying
        )
    )
    task.next_attempt_at = pending
    if pending is None:
        task.last_error = None


def mark_done(session: Session, outbox: OutboxMessage, now: datetime, event: str, **detail: Any) -> None:
    outbox.done_at = now
    outbox.attempts += 1
    finished(session, outbox, now, event, **detail)


def claim_finished(session: Session, outbox_id: int, now: datetime) -> OutboxMessage | None:
    """:func:`claim_outbox` for a delivery that is done whatever it finds (a relay's record): the row
    locked and finished in one ``UPDATE … RETURNING``, None once it is done. :func:`finished` then
    records what that causes, in the same transaction."""
    return session.scalars(_FINISH, {"outbox_id": outbox_id, "now": now}).one_or_none()


def finished(session: Session, outbox: OutboxMessage, now: datetime, event: str, **detail: Any) -> None:
    """What a row just marked done causes (its ``done_at`` and ``attempts`` already written)."""
    retried = outbox.attempts > 1 or outbox.next_attempt_at is not None
    if outbox.task_id is None:
        return
    if retried:
        # Only a row that failed an attempt can be what shows its task as retrying, so only then is
        # the task row written, and so locked: a first-time delivery leaves it free for the beat
        # jobs' SKIP LOCKED claims, and reads nothing of it.
        settle_retry(session, lock_task(session, outbox.task_id), outbox)
    record_event(session, outbox.task_id, event, now, {"message_id": outbox.message_id, **detail})
    ordering.settled(session, outbox, now)


_FINISH = (
    update(OutboxMessage)
    .where(OutboxMessage.id == bindparam("outbox_id"), OutboxMessage.done_at.is_(None))
    .values(done_at=bindparam("now"), attempts=OutboxMessage.attempts + 1)
    .returning(OutboxMessage)
    .execution_options(synchronize_session=False, populate_existing=True)
)
