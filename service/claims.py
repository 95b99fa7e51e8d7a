"""How a consumer takes its outbox row and its task: row locks, re-read under the lock, with the
large columns left unloaded. Every statement is built once and reused with bound parameters.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, Text, bindparam, cast, select, update
from sqlalchemy.orm import Session, defer

from models.messages import OutboxMessage
from models.task import ExternalTask
from wire.bounded_json import JsonLimits, check_bounds, strict_loads

#: Load a task without the caller's ``input`` (read only by the submit, through a guarded loader)
#: and, where noted, without the vendor's ``outcome``: both can be large, and rows stored before
#: their limits existed can be too deep to decode. A deferred column loads on first access.
WITHOUT_INPUT = (defer(ExternalTask.input),)


WITHOUT_PAYLOAD = (defer(ExternalTask.input), defer(ExternalTask.outcome))


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


def claim_finished(session: Session, outbox_id: int, now: datetime) -> OutboxMessage | None:
    """:func:`claim_outbox` for a delivery that is done whatever it finds (a relay's record): the row
    locked and finished in one ``UPDATE … RETURNING``, None once it is done. :func:`finished` then
    records what that causes, in the same transaction."""
    return session.scalars(_FINISH, {"outbox_id": outbox_id, "now": now}).one_or_none()


_FINISH = (
    update(OutboxMessage)
    .where(OutboxMessage.id == bindparam("outbox_id"), OutboxMessage.done_at.is_(None))
    .values(done_at=bindparam("now"), attempts=OutboxMessage.attempts + 1)
    .returning(OutboxMessage)
    .execution_options(synchronize_session=False, populate_existing=True)
)
