"""The outbox rows' family: an outbox row's life (``core/outbox_states.py``) written here, and the
statements that write a row with its task's timeline, claim it and finish it.

Two kinds of verb. A *move* (:meth:`OutboxRows.hold_until`, :meth:`OutboxRows.park`, …) writes a
locked row object's lifecycle columns as ``core.outbox_states.SIGNATURES`` has the state it moves
to; the unit of work sends them with whatever else the transaction changed, so a move costs no
statement of its own. A *statement* verb (:meth:`OutboxRows.add_row`,
:meth:`OutboxRows.start_delivery`, :meth:`OutboxRows.finish_delivered`, …) sends what it writes:
on PostgreSQL as one data-modifying ``WITH`` where several rows go together
(``models.store.postgres_rows``), on SQLite, which has no INSERT or UPDATE inside a ``WITH``, one
statement per row. :class:`PostgresOutboxRows` and :class:`SqliteOutboxRows` are the two; the
store (``models.store``) holds one, chosen when the database is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import (
    ColumnElement,
    ScalarSelect,
    Select,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, aliased, defer, load_only

from core.outbox_states import HOLDING, SIGNATURES, SWEPT, ParkedReason, RowState
from models.messages import PUBLISH_COLUMNS, OutboxKind, OutboxMessage
from models.statements import built_once
from models.store.loaded import OUTBOX_ROW, TASK_WITHOUT_INPUT, execute
from models.store.postgres_rows import insert_outbox_with, insert_task_with
from models.store.publication import stamp
from models.store.slots import give_back, give_back_statement
from models.store.timeline import add_entry
from models.task import ExternalTask, TaskEvent

#: Load a task without the caller's ``input`` (read only by the submit, through a guarded loader):
#: it can be large, and rows stored before its limits existed can be too deep to decode.
WITHOUT_INPUT = (defer(ExternalTask.input),)
#: and without the vendor's ``outcome`` either: where a step reads neither (a vendor event's task)
WITHOUT_PAYLOAD = (defer(ExternalTask.input), defer(ExternalTask.outcome))

#: a claimed row, its task, and the task's input as JSON text (when asked for)
Claimed = tuple[OutboxMessage, ExternalTask, str | None]
#: a timeline entry: its task id, kind, time and detail
Entry = tuple[int, str, datetime, dict[str, Any]]
#: a new task's first timeline entry: its kind, time and detail
FirstEntry = tuple[str, datetime, dict[str, Any]]


class OutboxRows:
    """The verbs both databases share: the moves, and the statements written alike for both."""

    #: Does :meth:`finish_delivered` write its three rows in one statement? (The relay's record
    #: then uses it; elsewhere the record's own steps write them, as they do for every task.)
    finishes_delivered_at_once: ClassVar[bool] = False
    #: Does :meth:`add_new_task` answer False for a task a request made before holds (PostgreSQL's
    #: ``ON CONFLICT DO NOTHING``)? Otherwise that conflict raises at the flush: look first.
    new_task_reports_conflict: ClassVar[bool] = False

    # --- moves: a locked row's lifecycle columns, flushed with the transaction -------------------

    def hold_until(self, row: OutboxMessage, due: datetime) -> None:
        """Held in the database until ``due`` (a retry or wait past the longest countdown, a paused
        endpoint, an earlier channel row): its message is not out, the sweep publishes it then."""
        row.next_attempt_at = due
        row.dispatched_at = None

    def publish(self, session: Session, row: OutboxMessage, now: datetime) -> None:
        """Its message goes out (``Move.PUBLISH``): stamped ``dispatched_at`` now, with its start
        lease from now when its kind has one (``models.store.publication.stamp``, which the publish
        hook stamps new and re-armed rows with)."""
        stamp(session, row, now)

    def due_now(self, row: OutboxMessage) -> None:
        """The sweep publishes it (stamped by the caller): nothing is due later any more."""
        row.next_attempt_at = None

    def lease_start(self, row: OutboxMessage, lease_until: datetime | None) -> None:
        """Its delivery must start (or, started, end) by ``lease_until`` (``service.start_leases``):
        a start's lease from now, or a countdown retry's, from its due time."""
        row.start_lease_until = lease_until

    def attempt_failed(self, row: OutboxMessage, next_attempt_at: datetime | None) -> None:
        """One failed call, its delivery ended normally (not poison); the next is due then."""
        row.attempts += 1
        row.deliveries = 0
        row.next_attempt_at = next_attempt_at

    def delivery_ended(self, row: OutboxMessage) -> None:
        """This delivery ended (normally, or with its outcome): no longer under way, not poison."""
        row.deliveries = 0

    def count_delivery(self, row: OutboxMessage) -> None:
        """One more start (the poison guard counts starts that never finished)."""
        row.deliveries += 1

    def count_start(self, row: OutboxMessage, lease_until: datetime | None) -> None:
        """A delivery's start counted, with its start lease from now (what :meth:`start_delivery`
        writes in its own statement on PostgreSQL)."""
        row.deliveries += 1
        row.start_lease_until = lease_until

    def await_earlier(self, row: OutboxMessage, recheck_at: datetime) -> None:
        """Held until an earlier relay of its task is settled (``service.ordering``), with the
        sweep's recheck at ``recheck_at`` should a release be missed."""
        row.parked_reason = ParkedReason.AWAITING_EARLIER.value
        row.dispatched_at = None
        row.next_attempt_at = recheck_at
        row.deliveries = 0  # this delivery ended normally: not a poison message

    def resume(self, row: OutboxMessage) -> None:
        """A held relay runs: nothing holds it any more (released, or rechecked by the sweep)."""
        if row.parked_reason == ParkedReason.AWAITING_EARLIER:
            row.parked_reason = None

    def release_held(self, row: OutboxMessage) -> None:
        """A held relay whose earlier one is settled: published again (the caller stamps it)."""
        row.parked_reason = None
        row.next_attempt_at = None

    def holds_back(self, row: OutboxMessage, holding: bool) -> None:
        """Whether a later relay of the task waits for this one (``service.ordering``)."""
        row.holds_back = holding

    def park(self, row: OutboxMessage, target: str) -> None:
        """Its callback endpoint answered 410 Gone: it waits for a person, unpublished."""
        row.parked_reason = ParkedReason.ENDPOINT_GONE.value
        row.target = target
        row.dispatched_at = row.next_attempt_at = None
        row.deliveries = 0

    def unpark(self, row: OutboxMessage) -> None:
        """Its endpoint was re-enabled: published again (the caller stamps it)."""
        row.parked_reason = None

    def queue(self, row: OutboxMessage) -> None:
        """Its task waits its turn in fair dispatch: unpublished, no start lease running."""
        row.parked_reason = ParkedReason.QUEUED.value
        row.dispatched_at = None
        row.start_lease_until = None

    def finish(self, row: OutboxMessage, now: datetime) -> None:
        """Done after an attempt (delivered, answered, skipped, canceled)."""
        row.done_at = now
        row.attempts += 1

    def finish_unattempted(self, row: OutboxMessage, now: datetime) -> None:
        """Done without a call of its own (the vendor's job id came; a dead letter's poison)."""
        row.done_at = now

    def replay(self, row: OutboxMessage, now: datetime) -> None:
        """Its dead letter is replayed: a new row again, with its budget starting now."""
        row.done_at = row.dispatched_at = row.next_attempt_at = row.parked_reason = None
        row.attempts = row.deliveries = 0
        row.holds_back = False
        row.created_at = now  # the retry budget (max total time) starts again

    # --- a new row -----------------------------------------------------------------------------------

    def new_row(
        self,
        kind: str,
        message_id: str,
        payload: dict[str, Any],
        created_at: datetime,
        *,
        task_id: int | None = None,
        correlation_id: str | None = None,
        sequence: int | None = None,
        parked_reason: str | None = None,
        target: str | None = None,
    ) -> OutboxMessage:
        """A new outbox row, not yet added: unsent (``core.outbox_states``), or queued when
        ``parked_reason`` says so; the publish hook stamps it before its INSERT when it goes out at
        commit. Every row Liaison writes is made here (a task's submit and relays, a channel's
        events, people's notices). Made without an attribute event per column (``models.store.loaded``)."""
        return OUTBOX_ROW.new(
            {
                "message_id": message_id,
                "kind": kind,
                "task_id": task_id,
                "correlation_id": correlation_id,
                "sequence": sequence,
                "payload": payload,
                "created_at": created_at,
                "parked_reason": parked_reason,
                "target": target,
            }
        )

    # --- statements alike on both databases --------------------------------------------------------

    def flag_holding_back(self, session: Session, earlier_id: int) -> bool:
        """Flag relay ``earlier_id`` as holding a later one back, if it still holds (:func:`holding`)
        and is free right now (``SKIP LOCKED``: whatever settles it may be waiting for the caller's
        row, so waiting here could close a circle); False otherwise (``service.ordering.hold``)."""
        return session.execute(_flag_holding_back(), {"earlier_id": earlier_id}).first() is not None

    def release_queued(self, session: Session, task_ids: list[int]) -> list[OutboxMessage]:
        """Un-park the queued submit rows of tasks fair dispatch released: one ``UPDATE …
        RETURNING`` the rows it changed (what the publisher needs), no SELECT before it. A row this
        session holds (added in this very submit) is refreshed from what RETURNING says."""
        return list(session.scalars(_RELEASE_QUEUED, {"task_ids": task_ids}).all())

    def unstamp(self, session: Session, ids: list[int], stamp: datetime) -> None:
        """The broker refused these rows' messages: un-stamp them (those still carrying ``stamp``)
        for the sweep, which publishes them later."""
        session.execute(_UNSTAMP, {"ids": ids, "stamp": stamp})

    def claim_finished(self, session: Session, outbox_id: int, now: datetime) -> OutboxMessage | None:
        """The row locked and finished in one ``UPDATE … RETURNING`` (a delivery done whatever it
        finds: a relay's record); None once it is done."""
        found = execute(session, _FINISH, {"outbox_id": outbox_id, "now": now}).one_or_none()
        return None if found is None else OUTBOX_ROW.one(session, found, populate_existing=True)

    # --- statements each database writes its own way ----------------------------------------------

    def add_row(self, session: Session, row: OutboxMessage, task: ExternalTask, entry: Entry | None) -> OutboxMessage:
        """Insert the new ``row`` and its timeline ``entry``; return the row, persistent."""
        raise NotImplementedError

    def add_new_task(self, session: Session, task: ExternalTask, row: OutboxMessage, event: FirstEntry) -> bool:
        """Insert a new task, its first entry and its submit ``row``; False: a request made before
        holds its correlation id or Idempotency-Key (PostgreSQL; SQLite raises ``IntegrityError``)."""
        raise NotImplementedError

    def start_delivery(
        self, session: Session, outbox_id: int, with_input: bool, lease_until: datetime | None
    ) -> Claimed | None:
        """The row and its task locked (``FOR NO KEY UPDATE``) for a delivery's start, the start
        counted (``deliveries + 1``) and its start lease set; None when it is gone or done."""
        raise NotImplementedError

    def finish_delivered(
        self,
        session: Session,
        outbox_id: int,
        now: datetime,
        event: tuple[str, dict[str, Any]],
        slots: list[str],
        holder: str,
    ) -> OutboxMessage | None:
        """A delivered relay's record: the row finished (:meth:`claim_finished`), its timeline
        ``event`` (kind, detail) written when it was still open, its ``slots`` given back whether
        or not it was. None when it was done already."""
        raise NotImplementedError

    # --- a task's callbacks in order, a progress report's copies, retries, the sweep: statements
    # alike on both databases (``FOR UPDATE`` and ``SKIP LOCKED`` left out by SQLite's compiler)

    def held_behind(self, session: Session, row: OutboxMessage) -> list[OutboxMessage]:
        """The relays of ``row``'s task held until it is settled (later in sequence, awaiting an
        earlier one, not done), locked and read afresh, in sequence order (``service.ordering.settled``).
        Waited for, not skipped: a held relay may be locked by a webhook coalescing a progress
        report into it, and passed over it would stall until the sweep's recheck."""
        return list(
            session.scalars(
                select(OutboxMessage)
                .where(
                    OutboxMessage.task_id == row.task_id,
                    OutboxMessage.sequence > row.sequence,
                    OutboxMessage.parked_reason == ParkedReason.AWAITING_EARLIER.value,
                    OutboxMessage.done_at.is_(None),
                )
                .order_by(OutboxMessage.sequence)
                .with_for_update()
                .execution_options(populate_existing=True)
            ).all()
        )

    def earlier_channel_due(self, session: Session, task_id: int, row_id: int) -> list[datetime | None]:
        """When the channel rows of task ``task_id`` before row ``row_id`` not yet done are next due
        (None for one queued or in flight now); empty when there is none."""
        return list(session.scalars(_earlier_channel_statement(), {"task_id": task_id, "id": row_id}).all())

    def next_retry_at(self, session: Session, task_id: int, besides_id: int) -> datetime | None:
        """The earliest retry of task ``task_id``'s rows other than ``besides_id`` (not done, not
        held: a relay held for an earlier one is not retrying); None when none waits for one."""
        return session.scalar(
            select(func.min(OutboxMessage.next_attempt_at)).where(
                OutboxMessage.task_id == task_id,
                OutboxMessage.id != besides_id,
                OutboxMessage.done_at.is_(None),
                OutboxMessage.next_attempt_at.is_not(None),
                OutboxMessage.parked_reason.is_(None),  # a relay held for an earlier one is not retrying
            )
        )

    def lock_if_free(self, session: Session, outbox_id: int) -> OutboxMessage | None:
        """Row ``outbox_id`` locked ``FOR NO KEY UPDATE``, unless another transaction holds it right
        now (``SKIP LOCKED``: passed over, None): a task's latest progress relay, which its start
        locks too (``service.progress``)."""
        return session.scalar(
            select(OutboxMessage).where(OutboxMessage.id == outbox_id).with_for_update(key_share=True, skip_locked=True)
        )

    def lock_channel_copy(self, session: Session, message_id: str) -> OutboxMessage | None:
        """The channel row whose message id is ``message_id`` (a relay's copy: ``wire.channel_messages.
        row_message_id``), locked unless another transaction holds it right now (``SKIP LOCKED``)."""
        return session.scalar(
            select(OutboxMessage)
            .where(OutboxMessage.message_id == message_id, OutboxMessage.kind == OutboxKind.CHANNEL)
            .with_for_update(skip_locked=True)
        )

    def claim_for_sweep(
        self, session: Session, now: datetime, grace_s: int, lease_s: int, batch: int
    ) -> list[OutboxMessage]:
        """The outbox sweep's rows (``runtime.outbox.Publisher.sweep``), at most ``batch``, in id
        order, locked (``SKIP LOCKED``: two beats never both publish one row), with what publishing
        reads and whether a submission ever started (:data:`SWEEP_COLUMNS`): rows in
        ``core.outbox_states.SWEPT`` never published (older than ``grace_s``), whose held retry is
        due, whose start lease ran out, or published but not done within ``lease_s``."""
        return list(
            session.scalars(
                select(OutboxMessage)
                .options(load_only(*SWEEP_COLUMNS))
                .where(
                    # not done; parked rows wait for a person, queued ones for fair dispatch; a relay
                    # held for an earlier one is rechecked when its next_attempt_at is due, should
                    # its release have been missed (core.outbox_states.SWEPT)
                    in_states(OutboxMessage, SWEPT),
                    or_(
                        # never published (broker down, crash after commit)
                        and_(
                            OutboxMessage.dispatched_at.is_(None),
                            OutboxMessage.next_attempt_at.is_(None),
                            OutboxMessage.created_at <= now - timedelta(seconds=grace_s),
                        ),
                        # a long wait held in the database, now due
                        and_(OutboxMessage.dispatched_at.is_(None), OutboxMessage.next_attempt_at <= now),
                        # out, but not started (or not finished) within its start lease: its worker died
                        and_(OutboxMessage.dispatched_at.is_not(None), OutboxMessage.start_lease_until <= now),
                        # published, but neither done nor retried within the lease: the message was lost
                        func.coalesce(OutboxMessage.next_attempt_at, OutboxMessage.dispatched_at)
                        <= now - timedelta(seconds=lease_s),
                    ),
                )
                .order_by(OutboxMessage.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            ).all()
        )


class SqliteOutboxRows(OutboxRows):
    """SQLite: no INSERT or UPDATE inside a ``WITH``, so one statement per row; no row locks either
    (``BEGIN IMMEDIATE`` serialises writers: ``models.db``)."""

    def add_row(self, session: Session, row: OutboxMessage, task: ExternalTask, entry: Entry | None) -> OutboxMessage:
        if entry is not None:
            add_entry(session, *entry)
        session.add(row)
        session.flush()
        return row

    def add_new_task(self, session: Session, task: ExternalTask, row: OutboxMessage, event: FirstEntry) -> bool:
        session.add(task)
        session.flush()
        row.task_id = task.id
        self.add_row(session, row, task, (task.id, *event))
        return True

    def start_delivery(
        self, session: Session, outbox_id: int, with_input: bool, lease_until: datetime | None
    ) -> Claimed | None:
        found = execute(session, _claim_with_task_statement(with_input), {"outbox_id": outbox_id}).first()
        claimed = None if found is None else read_claimed(session, found, with_input)
        if claimed is not None:
            self.count_start(claimed[0], lease_until)
        return claimed

    def finish_delivered(
        self,
        session: Session,
        outbox_id: int,
        now: datetime,
        event: tuple[str, dict[str, Any]],
        slots: list[str],
        holder: str,
    ) -> OutboxMessage | None:
        row = self.claim_finished(session, outbox_id, now)
        if row is not None and row.task_id is not None:
            add_entry(session, row.task_id, event[0], now, event[1])
        give_back(session, slots, holder)
        return row


class PostgresOutboxRows(OutboxRows):
    """PostgreSQL: the rows a step writes together go in one statement (``models.store.postgres_rows``)."""

    finishes_delivered_at_once = True
    new_task_reports_conflict = True

    def add_row(self, session: Session, row: OutboxMessage, task: ExternalTask, entry: Entry | None) -> OutboxMessage:
        if entry is not None:
            return insert_outbox_with(session, row, entry, task)
        session.add(row)
        session.flush()
        return row

    def add_new_task(self, session: Session, task: ExternalTask, row: OutboxMessage, event: FirstEntry) -> bool:
        return insert_task_with(session, task, row, event)

    def start_delivery(
        self, session: Session, outbox_id: int, with_input: bool, lease_until: datetime | None
    ) -> Claimed | None:
        """One ``UPDATE … RETURNING`` whose row the task is locked and read with. A start that rolls
        back (its call must wait) takes the count and the lease back with it."""
        params = {"outbox_id": outbox_id, "lease_until": lease_until}
        found = execute(session, _start_delivery_statement(with_input), params).first()
        return None if found is None else read_claimed(session, found, with_input)  # None: gone, or done already

    def finish_delivered(
        self,
        session: Session,
        outbox_id: int,
        now: datetime,
        event: tuple[str, dict[str, Any]],
        slots: list[str],
        holder: str,
    ) -> OutboxMessage | None:
        """Three round trips in one for every callback (a data-modifying ``WITH``)."""
        kind, detail = event
        # no key may be named as an outbox column: an UPDATE's parameters of that name become SET clauses
        params = {
            "outbox_id": outbox_id,
            "now": now,
            "e_kind": kind,
            "e_detail": detail,
            "names": slots,
            "holder": holder,
        }
        found = execute(session, _finish_delivered_statement(), params).one_or_none()
        return None if found is None else OUTBOX_ROW.one(session, found, populate_existing=True)


def claimed_columns(row: Sequence[ColumnElement[Any]], with_input: bool) -> list[ColumnElement[Any]]:
    """What a claim selects: an outbox row's columns (the table's, or an ``UPDATE``'s rows' in
    :data:`OUTBOX_ROW`'s order), its task's but the ``input``, and the input as JSON text if asked
    (:func:`read_claimed` reads them back)."""
    columns = [*row, *TASK_WITHOUT_INPUT.columns]
    if with_input:
        columns.append(cast(_TASKS.c.input, Text))
    return columns


def read_claimed(session: Session, found: Sequence[Any], with_input: bool) -> Claimed | None:
    """A claim's row (:func:`claimed_columns`, and what follows them) as the session's row and task
    objects, re-read (``populate_existing``), and the input's text; None when the row is done."""
    n = len(OUTBOX_ROW.columns)
    m = n + len(TASK_WITHOUT_INPUT.columns)
    row = OUTBOX_ROW.one(session, found[:n], populate_existing=True)
    task = TASK_WITHOUT_INPUT.one(session, found[n:m], populate_existing=True)
    assert row is not None and task is not None
    if row.done_at is not None:
        return None
    raw = (found[m] if found[m] is not None else "null") if with_input else None
    return row, task, raw


def _table(entity: type[Any]) -> Table:
    table = entity.__table__
    assert isinstance(table, Table)
    return table


_TASKS = _table(ExternalTask)


@built_once
def _claim_with_task_statement(with_input: bool) -> Select[Any]:
    outbox = _table(OutboxMessage)
    return (
        select(*claimed_columns(OUTBOX_ROW.columns, with_input))
        .select_from(outbox.join(_TASKS, _TASKS.c.id == outbox.c.task_id))
        .where(outbox.c.id == bindparam("outbox_id"))
        .with_for_update(of=[outbox, _TASKS], key_share=True)
    )


@built_once
def _start_delivery_statement(with_input: bool) -> Select[Any]:
    outbox = _table(OutboxMessage)
    counted = (
        update(outbox)
        .where(outbox.c.id == bindparam("outbox_id"), outbox.c.done_at.is_(None))
        .values(
            deliveries=outbox.c.deliveries + 1,
            start_lease_until=bindparam("lease_until", type_=outbox.c.start_lease_until.type),
        )
        .returning(*outbox.c)
        .cte("counted")
    )
    return (
        select(*claimed_columns([counted.c[c.key] for c in OUTBOX_ROW.columns], with_input))
        .select_from(counted.join(_TASKS, _TASKS.c.id == counted.c.task_id))
        .with_for_update(of=_TASKS, key_share=True)
    )


def holding(row: type[OutboxMessage] | Any) -> ColumnElement[bool]:
    """``core.outbox_states.HOLDING`` in SQL, written from the states' signatures: not done, and
    ``parked_reason`` one of theirs (null, or ``awaiting_earlier``; not parked for a person, nor
    queued). A relay in flight, waiting for a retry or itself held still holds the later ones.
    ``core.outbox_states.SWEPT`` is the same set: what the outbox sweep looks at."""
    return in_states(row, HOLDING)


def in_states(row: type[OutboxMessage] | Any, states: frozenset[RowState]) -> ColumnElement[bool]:
    """Rows in ``states`` that are not done, told by ``done_at`` and ``parked_reason`` alone (the
    other columns tell states apart only among rows of one reason: ``state_of``)."""
    signatures = [SIGNATURES[state] for state in states]
    if any(signature.done for signature in signatures):
        raise ValueError("in_states tells only rows not done apart")
    reasons = {signature.parked_reason for signature in signatures}
    named = sorted(str(reason) for reason in reasons if reason is not None)
    parked = [row.parked_reason == reason for reason in named]
    if None in reasons:
        parked.insert(0, row.parked_reason.is_(None))
    return and_(row.done_at.is_(None), or_(*parked))


@built_once
def _flag_holding_back() -> Any:
    earlier = aliased(OutboxMessage)  # not correlated with the UPDATE's own table
    free = (
        select(earlier.id)
        .where(earlier.id == bindparam("earlier_id"), holding(earlier))
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    return (
        update(OutboxMessage)
        .where(OutboxMessage.id == free)
        .values(holds_back=True)
        .returning(OutboxMessage.id)
        .execution_options(synchronize_session=False)
    )


_RELEASE_QUEUED = (
    update(OutboxMessage)
    .where(
        OutboxMessage.task_id.in_(bindparam("task_ids", expanding=True)),
        OutboxMessage.kind == OutboxKind.SUBMIT,
        OutboxMessage.parked_reason == ParkedReason.QUEUED.value,
    )
    .values(parked_reason=None)
    .returning(OutboxMessage)
    .execution_options(synchronize_session=False, populate_existing=True)
)
_UNSTAMP = (
    update(OutboxMessage)
    .where(OutboxMessage.id.in_(bindparam("ids", expanding=True)), OutboxMessage.dispatched_at == bindparam("stamp"))
    .values(dispatched_at=None)
    .execution_options(synchronize_session=False)
)
_FINISH = (
    update(_table(OutboxMessage))
    .where(OutboxMessage.__table__.c.id == bindparam("outbox_id"), OutboxMessage.__table__.c.done_at.is_(None))
    .values(
        done_at=bindparam("now", type_=OutboxMessage.__table__.c.done_at.type),
        attempts=OutboxMessage.__table__.c.attempts + 1,
    )
    .returning(*OUTBOX_ROW.columns)
)


@built_once
def _finish_delivered_statement() -> Select[tuple[OutboxMessage]]:
    outbox = _table(OutboxMessage)
    events = _table(TaskEvent)
    done = (
        update(outbox)
        .where(outbox.c.id == bindparam("outbox_id"), outbox.c.done_at.is_(None))
        .values(done_at=bindparam("now", type_=outbox.c.done_at.type), attempts=outbox.c.attempts + 1)
        .returning(*outbox.c)
        .cte("done")
    )
    event = (
        insert(events)
        .from_select(
            ["task_id", "at", "kind", "detail"],
            select(
                done.c.task_id,
                bindparam("now", type_=events.c.at.type),
                bindparam("e_kind", type_=events.c.kind.type),
                bindparam("e_detail", type_=events.c.detail.type),
            ).where(done.c.task_id.is_not(None)),
        )
        .cte("event_row")
    )
    return (
        select(*(done.c[c.key] for c in OUTBOX_ROW.columns))
        .add_cte(event)
        .add_cte(give_back_statement().cte("slots_given_back"))
    )


def held_by() -> ScalarSelect[int]:
    """``core.ordering.held_by`` as a subquery of a statement reading ``OutboxMessage``: the id of
    the latest earlier relay of the same task still holding it, or NULL. Uses the unique
    ``(task_id, sequence)`` index; other tasks' relays are never looked at."""
    earlier = aliased(OutboxMessage)
    return (
        select(earlier.id)
        .where(
            earlier.task_id == OutboxMessage.task_id,
            earlier.sequence < OutboxMessage.sequence,
            holding(earlier),
        )
        .order_by(earlier.sequence.desc())
        .limit(1)
        .correlate(OutboxMessage)
        .scalar_subquery()
    )


@built_once
def _earlier_channel_statement() -> Select[tuple[datetime | None]]:
    return select(OutboxMessage.next_attempt_at).where(
        OutboxMessage.task_id == bindparam("task_id"),
        OutboxMessage.kind == OutboxKind.CHANNEL,
        OutboxMessage.id < bindparam("id"),
        OutboxMessage.done_at.is_(None),
    )


#: what the sweep reads of a row: what publishing needs, and whether a submission ever started
SWEEP_COLUMNS = (*PUBLISH_COLUMNS, OutboxMessage.attempts, OutboxMessage.deliveries, OutboxMessage.parked_reason)
