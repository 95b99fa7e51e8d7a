"""Rows written together in one round trip on PostgreSQL: a new outbox row, the timeline event
that goes with it and the pending changes of its task, as one data-modifying ``WITH`` (SQLite has
no INSERT or UPDATE inside a WITH; its callers keep one statement per row: ``service.outbox_rows``).

A state change writes three rows of three tables at once (the task's update, its event, the outbox
row that relays it), and the unit of work would send each in a statement of its own. Here the
outbox row is inserted by Core, then made a persistent object of the session (its id from
``RETURNING``) and noted for the publish hook as a flushed row is; the task's modified columns go
in the same statement and are marked written, so the flush at commit has nothing left to send.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import Insert, Table, bindparam, insert, inspect, update
from sqlalchemy.orm import Session, make_transient_to_detached

from models.base import utcnow
from models.messages import OutboxMessage
from models.publishing import note_inserted, stamp_unflushed
from models.task import ExternalTask, TaskEvent

_OUTBOX = cast("Table", OutboxMessage.__table__)
_EVENTS = cast("Table", TaskEvent.__table__)
_TASKS = cast("Table", ExternalTask.__table__)
#: every outbox column but the id: the row's object holds them all, so nothing is left to load
_OUTBOX_COLUMNS = tuple(c.key for c in _OUTBOX.columns if c.key != "id")
_TASK_COLUMNS = frozenset(c.key for c in _TASKS.columns if c.key != "id")


def insert_outbox_with(
    session: Session, row: OutboxMessage, event: tuple[int, str, datetime, dict[str, Any]], task: ExternalTask
) -> OutboxMessage:
    """Insert ``row`` (a new, unflushed outbox object), the timeline ``event`` (task id, kind, at,
    detail) and ``task``'s pending column changes in one statement; return ``row``, now persistent.

    The task's changes go along only when they are all columns of its own (nothing else, a
    relationship say, waits to be flushed with them); otherwise the flush writes them, as before."""
    _defaults(session, row)
    changes = _pending_columns(task)
    task_id, kind, at, detail = event
    params: dict[str, Any] = {f"o_{key}": getattr(row, key) for key in _OUTBOX_COLUMNS}
    params.update(e_task_id=task_id, e_kind=kind, e_at=at, e_detail=detail)
    if changes:
        changes.setdefault("updated_at", utcnow())  # what the column's onupdate would have written
        params.update({f"t_{key}": value for key, value in changes.items()}, t_id=task.id)
    row.id = session.execute(_statement(tuple(sorted(changes))), params).scalar_one()
    if changes:
        state = inspect(task)
        # every pending change is written: the object is as loaded (the unit of work's own step
        # after it flushes an object), so the commit's flush finds nothing to do
        state._commit_all(state.dict, session.identity_map)
    make_transient_to_detached(row)
    session.add(row)
    note_inserted(session, row)
    return row


def _defaults(session: Session, row: OutboxMessage) -> None:
    """What a flush would give a new row, set on the object, so the INSERT writes it and the
    object holds it: the columns' defaults, and the publish hook's stamp."""
    for key, value in (("attempts", 0), ("deliveries", 0), ("holds_back", False), ("payload", {})):
        if getattr(row, key) is None:
            setattr(row, key, value)
    stamp_unflushed(session, row)


def _pending_columns(task: ExternalTask) -> dict[str, Any]:
    """The task's modified columns and their new values; empty when it has none, or when anything
    but its own columns is pending (the flush then writes the lot)."""
    state = inspect(task)
    if not state.persistent or not state.modified:
        return {}
    keys = set(state.committed_state)
    if not keys <= _TASK_COLUMNS:
        return {}
    return {key: state.dict[key] for key in keys}


@cache
def _statement(task_columns: tuple[str, ...]) -> Insert:
    """Built once per set of task columns changed (a few shapes: accepted, completed …)."""
    event = insert(_EVENTS).values(
        task_id=bindparam("e_task_id", type_=_EVENTS.c.task_id.type),
        kind=bindparam("e_kind", type_=_EVENTS.c.kind.type),
        at=bindparam("e_at", type_=_EVENTS.c.at.type),
        detail=bindparam("e_detail", type_=_EVENTS.c.detail.type),
    )
    outbox = (
        insert(_OUTBOX)
        .values({key: bindparam(f"o_{key}", type_=_OUTBOX.c[key].type) for key in _OUTBOX_COLUMNS})
        .returning(_OUTBOX.c.id)
        .add_cte(event.cte("event_row"))
    )
    if not task_columns:
        return outbox
    task = (
        update(_TASKS)
        .where(_TASKS.c.id == bindparam("t_id", type_=_TASKS.c.id.type))
        .values({key: bindparam(f"t_{key}", type_=_TASKS.c[key].type) for key in task_columns})
    )
    return outbox.add_cte(task.cte("task_row"))
