"""Rows written together in one round trip on PostgreSQL: a new outbox row, the timeline event
that goes with it and the pending changes of its task, as one data-modifying ``WITH`` (SQLite has
no INSERT or UPDATE inside a WITH: ``models.store.outbox.SqliteOutboxRows`` keeps one statement per
row). Only the store's PostgreSQL classes call it (``models.store.outbox.PostgresOutboxRows``).

A state change writes three rows of three tables at once (the task's update, its event, the outbox
row that relays it), and the unit of work would send each in a statement of its own. Here the
outbox row is inserted by Core, then made a persistent object of the session (its id from
``RETURNING``) and noted for the publish hook as a flushed row is; the task's modified columns go
in the same statement and are marked written, so the flush at commit has nothing left to send.
A timeline entry without an outbox row takes its task's pending changes, and those of the outbox
row the change finishes, the same way (:func:`insert_event_with`).

Marking rows written is the ORM's own bookkeeping (``InstanceState._commit_all``, as the unit of
work does after a flush): private API, kept in the store (``tests/unit/test_store_boundary.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Insert, Table, TextClause, Update, bindparam, insert, inspect, text, update
from sqlalchemy.orm import InstanceState, Session

from models.base import utcnow
from models.messages import OutboxMessage
from models.statements import built_once
from models.store.loaded import OUTBOX_ROW, TASK
from models.store.publication import note_inserted, stamp_unflushed
from models.task import ExternalTask, TaskEvent

_OUTBOX = cast("Table", OutboxMessage.__table__)
_EVENTS = cast("Table", TaskEvent.__table__)
_TASKS = cast("Table", ExternalTask.__table__)
#: every outbox column but the id: the row's object holds them all, so nothing is left to load
_OUTBOX_COLUMNS = tuple(c.key for c in _OUTBOX.columns if c.key != "id")
_TABLES = {table.name: table for table in (_OUTBOX, _TASKS)}
#: the columns a row's pending changes may touch to be written here (every one but the id)
_COLUMNS = {name: frozenset(c.key for c in table.columns if c.key != "id") for name, table in _TABLES.items()}


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
    held = row.__dict__
    params: dict[str, Any] = {f"o_{key}": held.get(key) for key in _OUTBOX_COLUMNS}
    params.update(e_task_id=task_id, e_kind=kind, e_at=at, e_detail=detail)
    if changes:
        changes.setdefault("updated_at", utcnow())  # what the column's onupdate would have written
        params.update({f"t_{key}": value for key, value in changes.items()}, t_id=task.id)
    held["id"] = session.execute(_statement(tuple(sorted(changes))), params).scalar_one()
    if changes:
        state = inspect(task)
        # every pending change is written: the object is as loaded (the unit of work's own step
        # after it flushes an object), so the commit's flush finds nothing to do
        state._commit_all(state.dict, session.identity_map)
    _hold_every_column(row)
    OUTBOX_ROW.persist(session, row)
    note_inserted(session, row)
    return row


def insert_task_with(
    session: Session, task: ExternalTask, row: OutboxMessage, event: tuple[str, datetime, dict[str, Any]]
) -> bool:
    """Insert the new ``task``, its first timeline ``event`` (kind, at, detail) and its outbox ``row``
    in one statement, unless a unique constraint holds the task already (``ON CONFLICT DO NOTHING``:
    a request made before with its correlation id or Idempotency-Key): False then, and nothing
    written. True: both objects are persistent, the row noted for the publish hook.

    The submit's three inserts in one round trip, and the look for an earlier request only when
    the insert found one, instead of before every submit."""
    _column_defaults(task, _TASKS)
    _defaults(session, row)
    kind, at, detail = event
    held_task, held_row = task.__dict__, row.__dict__
    params: dict[str, Any] = {f"t_{key}": held_task.get(key) for key in _COLUMNS[_TASKS.name]}
    params.update({f"o_{key}": held_row.get(key) for key in _OUTBOX_COLUMNS if key != "task_id"})
    params.update(e_kind=kind, e_at=at, e_detail=detail)
    inserted = session.execute(_TASK_STATEMENT, params).first()
    if inserted is None:
        return False
    held_row["id"], held_task["id"] = inserted
    held_row["task_id"] = held_task["id"]
    _hold_every_column(task)
    _hold_every_column(row)
    TASK.persist(session, task)
    OUTBOX_ROW.persist(session, row)
    note_inserted(session, row)
    return True


def _hold_every_column(obj: ExternalTask | OutboxMessage) -> None:
    """Every column the statement wrote is on the object, None ones too: a column the object never
    held would be expired as it becomes persistent, and read back by the first access to it."""
    held = obj.__dict__
    for key in _COLUMNS[type(obj).__tablename__]:
        held.setdefault(key, None)


def _column_defaults(obj: ExternalTask, table: Table) -> None:
    """The Python-side defaults a flush would give the columns left unset (every one is a plain
    value or a function of nothing)."""
    held = obj.__dict__  # transient: written as the constructor would, no attribute events
    for column in table.columns:
        default = column.default
        if column.key == "id" or default is None or held.get(column.key) is not None:
            continue
        held[column.key] = default.arg if default.is_scalar else default.arg(None)  # type: ignore[attr-defined]


def _task_statement() -> TextClause:
    """Written out once: PostgreSQL's ``ON CONFLICT`` through the dialect's construct cannot be cached
    by SQLAlchemy 2.0 (``models.base.upsert``), and it would be compiled on every submit."""
    task_columns = sorted(_COLUMNS[_TASKS.name])
    outbox_columns = [key for key in _OUTBOX_COLUMNS if key != "task_id"]
    sql = (
        f"WITH task_row AS (INSERT INTO {_TASKS.name} ({', '.join(task_columns)})"
        f" VALUES ({', '.join(f':t_{key}' for key in task_columns)}) ON CONFLICT DO NOTHING RETURNING id),"
        f" event_row AS (INSERT INTO {_EVENTS.name} (task_id, at, kind, detail)"
        " SELECT id, :e_at, :e_kind, :e_detail FROM task_row)"
        f" INSERT INTO {_OUTBOX.name} (task_id, {', '.join(outbox_columns)})"
        f" SELECT id, {', '.join(f':o_{key}' for key in outbox_columns)} FROM task_row"
        f" RETURNING {_OUTBOX.name}.id, {_OUTBOX.name}.task_id"
    )
    types = {f"t_{key}": _TASKS.c[key].type for key in task_columns}
    types.update({f"o_{key}": _OUTBOX.c[key].type for key in outbox_columns})
    types.update(e_at=_EVENTS.c.at.type, e_kind=_EVENTS.c.kind.type, e_detail=_EVENTS.c.detail.type)
    return text(sql).bindparams(*(bindparam(name, type_=type_) for name, type_ in types.items()))


def insert_event_with(
    session: Session, event: tuple[int, str, datetime, dict[str, Any]], rows: tuple[ExternalTask | OutboxMessage, ...]
) -> None:
    """Insert the timeline ``event`` (task id, kind, at, detail) with the pending column changes of
    ``rows`` (a task, the outbox row its change finishes), each an ``UPDATE`` in the same statement,
    and mark them written: a vendor's answer to a submit moves the task, finishes its row and
    writes its entry in one round trip instead of three. A row with nothing pending, or with more
    than its own columns pending, is left to the flush as before."""
    written = [(row, changes) for row in rows if (changes := _pending_columns(row))]
    task_id, kind, at, detail = event
    params: dict[str, Any] = {"e_task_id": task_id, "e_kind": kind, "e_at": at, "e_detail": detail}
    shape = []
    for i, (row, changes) in enumerate(written):
        if isinstance(row, ExternalTask):
            changes.setdefault("updated_at", utcnow())  # what the column's onupdate would have written
        params.update({f"u{i}_{key}": value for key, value in changes.items()}, **{f"u{i}_id": row.id})
        shape.append((type(row).__tablename__, tuple(sorted(changes))))
    session.execute(_event_statement(tuple(shape)), params)
    for row, _ in written:
        state: InstanceState[Any] = inspect(row)
        state._commit_all(state.dict, session.identity_map)  # as the unit of work does after a flush


def _defaults(session: Session, row: OutboxMessage) -> None:
    """What a flush would give a new row, set on the object, so the INSERT writes it and the
    object holds it: the columns' defaults, and the publish hook's stamp."""
    held = row.__dict__  # transient: written as the constructor would, no attribute events
    for key, value in (("attempts", 0), ("deliveries", 0), ("holds_back", False), ("payload", {})):
        if held.get(key) is None:
            held[key] = value
    stamp_unflushed(session, row)


def _pending_columns(row: ExternalTask | OutboxMessage) -> dict[str, Any]:
    """The row's modified columns and their new values; empty when it has none, or when anything
    but its own columns is pending (the flush then writes the lot)."""
    state: InstanceState[Any] = inspect(row)
    if not state.persistent or not state.modified:
        return {}
    keys = set(state.committed_state)
    if not keys <= _COLUMNS[type(row).__tablename__]:
        return {}
    return {key: state.dict[key] for key in keys}


def _update(table: Table, prefix: str, columns: tuple[str, ...]) -> Update:
    return (
        update(table)
        .where(table.c.id == bindparam(f"{prefix}_id", type_=table.c.id.type))
        .values({key: bindparam(f"{prefix}_{key}", type_=table.c[key].type) for key in columns})
    )


def _event_insert() -> Insert:
    return insert(_EVENTS).values(
        task_id=bindparam("e_task_id", type_=_EVENTS.c.task_id.type),
        kind=bindparam("e_kind", type_=_EVENTS.c.kind.type),
        at=bindparam("e_at", type_=_EVENTS.c.at.type),
        detail=bindparam("e_detail", type_=_EVENTS.c.detail.type),
    )


@built_once
def _event_statement(shape: tuple[tuple[str, tuple[str, ...]], ...]) -> Insert:
    """:func:`insert_event_with`'s statement, built once per shape (which tables, which columns)."""
    statement = _event_insert()
    for i, (table, columns) in enumerate(shape):
        statement = statement.add_cte(_update(_TABLES[table], f"u{i}", columns).cte(f"row_{i}"))
    return statement


@built_once
def _statement(task_columns: tuple[str, ...]) -> Insert:
    """Built once per set of task columns changed (a few shapes: accepted, completed …)."""
    event = _event_insert()
    outbox = (
        insert(_OUTBOX)
        .values({key: bindparam(f"o_{key}", type_=_OUTBOX.c[key].type) for key in _OUTBOX_COLUMNS})
        .returning(_OUTBOX.c.id)
        .add_cte(event.cte("event_row"))
    )
    if not task_columns:
        return outbox
    return outbox.add_cte(_update(_TASKS, "t", task_columns).cte("task_row"))


_TASK_STATEMENT = _task_statement()
