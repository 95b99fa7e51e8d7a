"""Tasks on their way to a vendor and at it: what the poll job, reconciliation, the start leases
and vendor events ask of them (``service.polling``, ``service.reconciliation``,
``service.start_leases``, ``service.vendor_events``, ``service.transitions``).

The beat's claims follow the rules of ``service.lifecycle``: the partial indexes' predicates as
written in ``models.task`` (``POLL_ARMED``, ``AT_VENDOR``, ``NOT_SUBMITTED``), and ``FOR NO KEY
UPDATE SKIP LOCKED`` on PostgreSQL, which SQLite's compiler leaves out (its ``BEGIN IMMEDIATE``
serialises the transaction already). So both databases run the same statements: one class,
:class:`VendorJobs`, serves both stores, as ``models.store.dispatch`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, Select, Table, bindparam, exists, func, or_, select, text, update
from sqlalchemy.orm import Session, load_only

from core.fair_share import RATE_LIMIT
from core.states import State
from models.attention import OrphanEvent
from models.messages import PENDING_CHECK, PUBLISH_COLUMNS, OutboxKind, OutboxMessage
from models.statements import built_once
from models.task import AT_VENDOR, NOT_SUBMITTED, POLL_ARMED, ExternalTask


class VendorJobs:
    """The verbs, alike on both databases."""

    # --- polling ---------------------------------------------------------------------------------

    def claim_due_polls(self, session: Session, provider: str, now: datetime, cap: int) -> list[ExternalTask]:
        """Up to ``cap`` tasks of ``provider`` whose poll is due and whose check is not pending,
        locked (``SKIP LOCKED``: another run's are passed over) and in fair order
        (:func:`due_query`). Two statements: PostgreSQL locks no rows of a query with a window
        function, so the fair order is read first and what it names is locked after."""
        ids = list(session.scalars(due_query(provider, now, cap)))
        if not ids:
            return []
        tasks = session.scalars(
            select(ExternalTask)
            .options(
                load_only(
                    ExternalTask.id,
                    ExternalTask.correlation_id,
                    ExternalTask.client_id,
                    ExternalTask.poll_due_at,
                    ExternalTask.polls,
                )
            )
            .where(ExternalTask.id.in_(ids), text(POLL_ARMED), ExternalTask.poll_due_at <= now)
            .with_for_update(skip_locked=True, key_share=True)
        ).all()
        turn = {task_id: n for n, task_id in enumerate(ids)}
        return sorted(tasks, key=lambda t: turn[t.id])

    # --- reconciliation --------------------------------------------------------------------------

    def claim_quiet(
        self, session: Session, provider: str, quiet_s: int, now: datetime, batch: int
    ) -> Sequence[ExternalTask]:
        """Tasks of ``provider`` at the vendor with no news for ``quiet_s``, oldest first, locked
        (:func:`quiet_query`); the caller claims them by moving ``checked_at``."""
        return session.scalars(quiet_query(provider, quiet_s, now, batch)).all()

    def claim_unsubmitted(self, session: Session, quiet_s: int, now: datetime, batch: int) -> Sequence[ExternalTask]:
        """Released tasks stuck in ``requested`` for ``quiet_s``, oldest first, locked; a queued
        task (never released) waits for its turn, it is not stuck. The caller moves ``checked_at``."""
        return session.scalars(
            select(ExternalTask)
            .options(load_only(ExternalTask.id, ExternalTask.checked_at))
            .where(
                text(NOT_SUBMITTED),
                ExternalTask.checked_at <= now - timedelta(seconds=quiet_s),
                ExternalTask.dispatched_at.is_not(None),  # a queued task waits for its turn, not stuck
            )
            .order_by(ExternalTask.checked_at)
            .limit(batch)
            .with_for_update(skip_locked=True, key_share=True)
        ).all()

    def open_submits(self, session: Session, task_ids: list[int]) -> list[OutboxMessage]:
        """The submit rows of ``task_ids`` to publish again: not done, not parked or queued, and no
        retry scheduled (a scheduled retry is not stuck); what publishing reads of them."""
        return list(
            session.scalars(
                select(OutboxMessage)
                .options(load_only(*PUBLISH_COLUMNS))
                .where(
                    OutboxMessage.task_id.in_(task_ids),
                    OutboxMessage.kind == OutboxKind.SUBMIT,
                    OutboxMessage.done_at.is_(None),
                    OutboxMessage.parked_reason.is_(None),
                    OutboxMessage.next_attempt_at.is_(None),  # a scheduled retry is not stuck
                )
            )
        )

    # --- start leases ----------------------------------------------------------------------------

    def lock_released_unsubmitted(self, session: Session, task_ids: Sequence[int]) -> Sequence[Row[Any]]:
        """Of ``task_ids``, those released and still ``requested`` (id, provider, client id),
        locked; one another transaction holds is passed over (``SKIP LOCKED``)."""
        return session.execute(
            select(ExternalTask.id, ExternalTask.provider, ExternalTask.client_id)
            .where(
                ExternalTask.id.in_(task_ids),
                ExternalTask.state == State.REQUESTED.value,
                ExternalTask.dispatched_at.is_not(None),
            )
            .with_for_update(skip_locked=True)
        ).all()

    def unrelease(self, session: Session, task_ids: list[int], wait_reason: str) -> None:
        """Tasks back in their clients' queues (``dispatched_at`` cleared), waiting for
        ``wait_reason``: one ``UPDATE``, the session's objects left as they are."""
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.id.in_(task_ids))
            .values(dispatched_at=None, wait_reason=wait_reason),
            execution_options={"synchronize_session": False},
        )

    def note_rate_limited(self, session: Session, task_id: int) -> bool:
        """A released submission, still ``requested``, waits for a slot of its vendor's rate limit
        (``wait_reason``): one ``UPDATE``; False when the task said so already (or moved on)."""
        return session.execute(_NOTE_RATE_LIMITED, {"task_id": task_id}).first() is not None

    # --- vendor events ---------------------------------------------------------------------------

    def job_of_reference(self, session: Session, source: str, reference: str) -> str | None:
        """The vendor job id of ``source``'s task with our ``reference``: None when there is no such
        task, "" while its submit's answer is not recorded."""
        row = session.execute(
            select(ExternalTask.vendor_job_id).where(
                ExternalTask.provider == source, ExternalTask.reference == reference
            )
        ).first()
        if row is None:
            return None
        return row[0] or ""

    def open_orphans(self, session: Session, source: str, job_id: str | None) -> Sequence[OrphanEvent]:
        """The open orphan events of ``source``'s job ``job_id``, in the order they arrived."""
        return session.scalars(_open_orphans_statement(), {"source": source, "job_id": job_id}).all()


def due_query(provider: str, now: datetime, cap: int) -> Select:
    """The ids of at most ``cap`` due tasks of ``provider`` in fair order: each client's oldest due
    first, every client's n-th before anyone's (n+1)-th. A subquery, since PostgreSQL locks no rows
    of a query with a window function: the caller locks what it names."""
    rank = func.row_number().over(partition_by=ExternalTask.client_id, order_by=ExternalTask.poll_due_at)
    check_pending = exists().where(OutboxMessage.task_id == ExternalTask.id, text(PENDING_CHECK))
    ranked = (
        select(ExternalTask.id, ExternalTask.poll_due_at, rank.label("turn"))
        .where(text(POLL_ARMED), ExternalTask.provider == provider, ExternalTask.poll_due_at <= now, ~check_pending)
        .subquery()
    )
    return select(ranked.c.id).order_by(ranked.c.turn, ranked.c.poll_due_at, ranked.c.id).limit(cap)


def quiet_query(provider: str, quiet_s: int, now: datetime, batch: int) -> Select:
    """Reconciliation's claim of quiet tasks at the vendor (:meth:`VendorJobs.claim_quiet`), on the
    partial index ``ix_external_tasks_quiet_at_vendor``."""
    return (
        select(ExternalTask)
        .options(
            load_only(
                ExternalTask.id,
                ExternalTask.correlation_id,
                ExternalTask.vendor_job_id,
                ExternalTask.checked_at,
                ExternalTask.traceparent,
            )
        )
        .where(
            text(AT_VENDOR),
            ExternalTask.provider == provider,
            ExternalTask.checked_at <= now - timedelta(seconds=quiet_s),
        )
        .order_by(ExternalTask.checked_at)
        .limit(batch)
        .with_for_update(skip_locked=True, key_share=True)
    )


@built_once
def _open_orphans_statement() -> Select[tuple[OrphanEvent]]:
    """Built once, reused with bound parameters (as every statement of the hot paths is):
    building a statement and its cache key on every call cost more CPU than running it."""
    return (
        select(OrphanEvent)
        .where(
            OrphanEvent.source == bindparam("source"),
            OrphanEvent.vendor_job_id == bindparam("job_id"),
            OrphanEvent.state == "open",
        )
        .order_by(OrphanEvent.received_at, OrphanEvent.id)
    )


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
