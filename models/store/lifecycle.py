"""A task's life beyond the happy path, as statements: its deadlines and heartbeat come due, its
cancel's key and reason, its unanswered submit, what an operator, a probe or a hint looks it up by,
and the locks a bulk replay takes first (``service.lifecycle``, ``service.probes``,
``service.checks``, ``service.operator_actions`` decide; these read and claim).

Every claim of due work repeats a partial index's predicate (``models.task``) so it touches only
rows that can be due, and takes them with ``FOR NO KEY UPDATE SKIP LOCKED``: two beats, or a run
overlapping the next, never act on one row twice. NO KEY: a plain ``FOR UPDATE`` would also skip
every task that another transaction is merely referencing (inserting a TaskEvent takes a key share
lock on its task). SQLite renders no ``FOR UPDATE``: its transactions start with ``BEGIN
IMMEDIATE``, which serialises writers already.

The statements are the same on both databases but one: :meth:`TaskLifecycle.lock_for_replay`,
the row locks a bulk replay takes in id order, which SQLite needs none of
(:class:`SqliteTaskLifecycle`); :class:`PostgresTaskLifecycle` takes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select, text, update
from sqlalchemy.orm import Session, load_only

from core.states import State
from models.messages import OutboxKind, OutboxMessage, ProcessedMessage
from models.store.outbox import WITHOUT_PAYLOAD
from models.task import AWAITING_ACCEPTANCE, AWAITING_COMPLETION, HEARTBEAT_ARMED, ExternalTask, TaskEvent

#: The timeline entry of a cancel that waits for the submit's outcome: its ``reason`` is the one the
#: task is canceled with once the vendor says it holds no job (``service.lifecycle.cancel_unsubmitted``).
CANCEL_REQUESTED_ENTRY = f"state.{State.CANCEL_REQUESTED.value}"


@dataclass(frozen=True)
class DeadlineRule:
    """A deadline: its name, its column, the column that marks it escalated (claimed, once), and the
    partial index's predicate its claim repeats."""

    name: str
    column: Any
    escalated: str
    predicate: str


DEADLINES = (
    DeadlineRule("acceptance", ExternalTask.acceptance_deadline, "acceptance_escalated_at", AWAITING_ACCEPTANCE),
    DeadlineRule("execution", ExternalTask.execution_deadline, "execution_escalated_at", AWAITING_COMPLETION),
)

#: What the deadline check reads of a task: never ``input`` or ``outcome``, which are the caller's
#: and the vendor's data, possibly large, and (rows stored before their limits existed) possibly too
#: deep to decode at all.
DEADLINE_COLUMNS = (
    ExternalTask.id,
    ExternalTask.correlation_id,
    ExternalTask.state,
    ExternalTask.vendor_job_id,
    ExternalTask.acceptance_deadline,
    ExternalTask.execution_deadline,
    ExternalTask.on_deadline,
    ExternalTask.relay_seq,  # the escalation's callback takes the next number
    ExternalTask.acceptance_escalated_at,
    ExternalTask.execution_escalated_at,
)

#: What the heartbeat check reads of a task (the probe it writes reads no more).
HEARTBEAT_COLUMNS = (
    ExternalTask.id,
    ExternalTask.correlation_id,
    ExternalTask.state,
    ExternalTask.vendor_job_id,
    ExternalTask.on_deadline,
    ExternalTask.heartbeat_due_at,
)

#: What a ``confirm`` hint reads of its task.
HINT_COLUMNS = (
    ExternalTask.id,
    ExternalTask.correlation_id,
    ExternalTask.state,
    ExternalTask.provider,
    ExternalTask.vendor_job_id,
    ExternalTask.poll_due_at,
)


def due_deadlines_query(rule: DeadlineRule, now: datetime, batch: int) -> Select[tuple[ExternalTask]]:
    """Tasks past ``rule``'s deadline and not yet escalated for it, on its partial index alone,
    oldest first (the statement :meth:`TaskLifecycle.due_deadlines` sends; EXPLAIN reads it too)."""
    return (
        select(ExternalTask)
        .options(load_only(*DEADLINE_COLUMNS))
        .where(text(rule.predicate), rule.column <= now)
        .order_by(rule.column)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


def heartbeats_due_query(now: datetime, batch: int) -> Select[tuple[ExternalTask]]:
    """Tasks at the vendor whose heartbeat is due, on ``ix_external_tasks_heartbeat_due`` alone (the
    predicate repeats the partial index's), claimed like every beat claim."""
    return (
        select(ExternalTask)
        .options(load_only(*HEARTBEAT_COLUMNS))
        .where(text(HEARTBEAT_ARMED), ExternalTask.heartbeat_due_at <= now)
        .order_by(ExternalTask.heartbeat_due_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


class TaskLifecycle:
    """The verbs both databases answer alike (all but :meth:`lock_for_replay`)."""

    # --- deadlines and heartbeats -----------------------------------------------------------------

    def due_deadlines(self, session: Session, rule: DeadlineRule, now: datetime, batch: int) -> Sequence[ExternalTask]:
        """Up to ``batch`` tasks past ``rule``'s deadline, not escalated for it, claimed (a task
        another transaction holds is skipped), without their input or outcome."""
        return session.scalars(due_deadlines_query(rule, now, batch)).all()

    def mark_escalated(self, session: Session, task_id: int, rule: DeadlineRule, now: datetime) -> None:
        """The task's ``rule`` deadline escalated (off its partial index), without its object: the
        claim whose savepoint failed, so the next run does not trip over it again."""
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.id == task_id)
            .values({rule.escalated: now})
            .execution_options(synchronize_session=False)
        )

    def heartbeats_due(self, session: Session, now: datetime, batch: int) -> Sequence[ExternalTask]:
        """Up to ``batch`` tasks at the vendor whose heartbeat is due, claimed, oldest first."""
        return session.scalars(heartbeats_due_query(now, batch)).all()

    def lock_without_payload(self, session: Session, task_id: int) -> ExternalTask:
        """The task, row-locked (key share), without its input or outcome, read afresh: a probe or a
        check reads neither, and rows stored before their limits may not even decode."""
        return session.scalars(
            select(ExternalTask)
            .options(*WITHOUT_PAYLOAD)
            .where(ExternalTask.id == task_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        ).one()

    # --- cancellation -----------------------------------------------------------------------------

    def cancel_key_use(self, session: Session, source: str, key: str) -> str | None:
        """What the cancel key ``key`` of ``source`` (``cancel:<client id>``) was recorded for: its
        inbox row's ``message_type`` (``cancel:<task id>``), None when it has none."""
        return session.scalar(
            select(ProcessedMessage.message_type).where(
                ProcessedMessage.source == source, ProcessedMessage.message_id == key
            )
        )

    def open_submit(self, session: Session, task_id: int) -> OutboxMessage | None:
        """The task's submit row while it is not done (a task has at most one)."""
        return session.scalar(
            select(OutboxMessage)
            .where(
                OutboxMessage.task_id == task_id,
                OutboxMessage.kind == OutboxKind.SUBMIT,
                OutboxMessage.done_at.is_(None),
            )
            .limit(1)
        )

    def cancel_request(self, session: Session, task_id: int) -> dict[str, Any] | None:
        """The detail of the task's latest ``cancel_requested`` entry (its ``reason``), if any."""
        return session.scalar(
            select(TaskEvent.detail)
            .where(TaskEvent.task_id == task_id, TaskEvent.kind == CANCEL_REQUESTED_ENTRY)
            .order_by(TaskEvent.id.desc())
            .limit(1)
        )

    # --- status checks (``service.checks``) -------------------------------------------------------

    def pending_check(self, session: Session, task_id: int) -> OutboxMessage | None:
        """The task's ``check`` row while it is not done (at most one:
        ``ux_outbox_messages_pending_check``), with its id and deliveries only."""
        return session.scalar(
            select(OutboxMessage)
            .options(load_only(OutboxMessage.id, OutboxMessage.deliveries))
            .where(
                OutboxMessage.task_id == task_id,
                OutboxMessage.kind == OutboxKind.CHECK,
                OutboxMessage.done_at.is_(None),
            )
        )

    # --- look-ups: an operator's, a hint's ------------------------------------------------------

    def tasks_named(
        self, session: Session, correlation_id: str, client_id: int | None, limit: int
    ) -> Sequence[ExternalTask]:
        """Up to ``limit`` tasks with that correlation id (of ``client_id`` only, when given): the
        ids are unique per client only, so several clients may have one."""
        query = select(ExternalTask).where(ExternalTask.correlation_id == correlation_id)
        if client_id is not None:
            query = query.where(ExternalTask.client_id == client_id)
        return session.scalars(query.limit(limit)).all()

    def task_for_hint(self, session: Session, provider: str, job_id: str) -> ExternalTask | None:
        """The task of ``provider``'s job ``job_id``, row-locked (key share), with what a hint reads."""
        return session.scalar(
            select(ExternalTask)
            .options(load_only(*HINT_COLUMNS))
            .where(ExternalTask.provider == provider, ExternalTask.vendor_job_id == job_id)
            .with_for_update(key_share=True)
        )

    # --- a bulk replay's locks --------------------------------------------------------------------

    def lock_for_replay(self, session: Session, outbox_ids: Sequence[int]) -> None:
        """The row locks of the tasks of these outbox rows, in id order, before any of a batch's
        letters is replayed: a replayed submission is released under the dispatch lock
        (``service.dispatch.requeue``), whose holder must never wait on a task, as the batch's next
        replay would otherwise."""
        raise NotImplementedError


class SqliteTaskLifecycle(TaskLifecycle):
    def lock_for_replay(self, session: Session, outbox_ids: Sequence[int]) -> None:
        """Nothing to take: ``BEGIN IMMEDIATE`` serialised this transaction already."""


class PostgresTaskLifecycle(TaskLifecycle):
    def lock_for_replay(self, session: Session, outbox_ids: Sequence[int]) -> None:
        if outbox_ids:
            task_ids = select(OutboxMessage.task_id).where(OutboxMessage.id.in_(outbox_ids))
            session.execute(
                select(ExternalTask.id)
                .where(ExternalTask.id.in_(task_ids))
                .order_by(ExternalTask.id)
                .with_for_update(key_share=True)
            ).all()
