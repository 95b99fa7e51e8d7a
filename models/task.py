"""The one record of a job, and its timeline."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from core import states
from core.states import State, in_order
from models.base import Base, Id, Json, UtcDateTime, utcnow
from models.client import Client


def state_in(chosen: frozenset[State]) -> str:
    """``states`` (a set of ``core.states``) as the SQL condition on ``state`` the indexes and their
    queries spell, in the states' declared order: ``state = 'a'`` or ``state IN ('a', 'b')``."""
    values = _quoted(chosen)
    return f"state = {values[0]}" if len(values) == 1 else f"state IN ({', '.join(values)})"


def state_not_in(left_out: frozenset[State]) -> str:
    """``state NOT IN (…)``: a set told by what it leaves out (``OPEN``: not ``TERMINAL``)."""
    return f"state NOT IN ({', '.join(_quoted(left_out))})"


def _quoted(chosen: frozenset[State]) -> list[str]:
    return [f"'{state.value}'" for state in in_order(chosen)]


#: Partial-index predicates: the beat jobs' queries repeat them word for word so the planner uses
#: the index, which then holds only the rows that can still become due, not every finished task.
#: Written from ``core.states``' sets (``tests/unit/test_partial_indexes.py`` checks them against
#: the sets and the migrations that built the indexes).
AWAITING_ACCEPTANCE = f"{state_in(states.AWAITING_ACCEPTANCE)} AND acceptance_escalated_at IS NULL"
AWAITING_COMPLETION = f"{state_in(states.OPEN)} AND execution_escalated_at IS NULL"
AT_VENDOR = state_in(states.AT_VENDOR)
NOT_SUBMITTED = state_in(states.NOT_SUBMITTED)
#: at the vendor with a heartbeat armed: what the heartbeat check reads (``heartbeat_due_at``)
HEARTBEAT_ARMED = f"{state_in(states.AT_VENDOR)} AND heartbeat_due_at IS NOT NULL"
#: at the vendor with a poll scheduled: what the poll job reads (``poll_due_at``, service.polling)
POLL_ARMED = f"{state_in(states.AT_VENDOR)} AND poll_due_at IS NOT NULL"
#: not final: what counts against a client's cap on open tasks (LIAISON_CLIENT_MAX_OPEN_TASKS)
OPEN = state_not_in(states.TERMINAL)
#: final: what retention may remove once it has been quiet for long enough (service.retention)
FINISHED = state_in(states.TERMINAL)
#: waiting in the database for its turn to go to the broker (service.dispatch)
QUEUED = f"{state_in(states.NOT_SUBMITTED)} AND dispatched_at IS NULL"
#: released to the broker and not final: what a vendor's capacity and a concurrency key count
RELEASED_OPEN = f"dispatched_at IS NOT NULL AND {state_in(states.OPEN)}"
#: the timeline events of a task reaching succeeded or failed: the console's chart counts them per minute
FINISHED_EVENTS = "kind IN ('state.succeeded', 'state.failed')"


def new_reference() -> str:
    """An opaque vendor reference: random, so it says nothing about the client or its ids."""
    return "ref_" + secrets.token_hex(16)


def _partial(name: str, *columns: str, predicate: str) -> Index:
    where = text(predicate)
    return Index(name, *columns, postgresql_where=where, sqlite_where=where)


class ExternalTask(Base):
    __tablename__ = "external_tasks"
    __table_args__ = (
        # Idempotency is the database's job: two racing requests cannot both insert.
        UniqueConstraint("client_id", "idempotency_key"),
        # Correlation ids are the client's names: unique per client, so no tenant can take or probe another's.
        # correlation_id leads, so operators' lookups by correlation id alone use the index too.
        UniqueConstraint("correlation_id", "client_id"),
        UniqueConstraint("provider", "vendor_job_id"),
        Index("ix_external_tasks_client_id_id", "client_id", "id"),
        Index("ix_external_tasks_state_provider", "state", "provider"),  # the tasks-by-state gauge
        _partial("ix_external_tasks_acceptance_due", "acceptance_deadline", predicate=AWAITING_ACCEPTANCE),
        _partial("ix_external_tasks_execution_due", "execution_deadline", predicate=AWAITING_COMPLETION),
        _partial("ix_external_tasks_quiet_at_vendor", "provider", "checked_at", predicate=AT_VENDOR),
        _partial("ix_external_tasks_quiet_requested", "checked_at", predicate=NOT_SUBMITTED),
        _partial("ix_external_tasks_client_open", "client_id", predicate=OPEN),
        _partial("ix_external_tasks_heartbeat_due", "heartbeat_due_at", predicate=HEARTBEAT_ARMED),
        _partial("ix_external_tasks_poll_due", "provider", "poll_due_at", predicate=POLL_ARMED),
        _partial("ix_external_tasks_retrying", "next_attempt_at", predicate="next_attempt_at IS NOT NULL"),
        _partial("ix_external_tasks_finished", "updated_at", predicate=FINISHED),  # retention, oldest first
        # fair dispatch: a client's queue in rank order, and what is on its way or open at a vendor
        _partial("ix_external_tasks_queued", "provider", "client_id", "dispatch_rank", "id", predicate=QUEUED),
        _partial(
            "ix_external_tasks_released_open", "provider", "client_id", "concurrency_key", predicate=RELEASED_OPEN
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    correlation_id: Mapped[str] = mapped_column(String(200))
    # What the vendor knows the task by (its ``reference`` and Idempotency-Key): globally unique and
    # stable for the task's life, unlike a correlation id, which two clients may share.
    reference: Mapped[str] = mapped_column(String(200), unique=True, default=new_reference)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"))
    provider: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(32), default=State.REQUESTED.value)
    input: Mapped[Any] = mapped_column(Json)
    outcome: Mapped[Any | None] = mapped_column(Json)
    callback_url: Mapped[str | None] = mapped_column(String(2000))
    # The client's broker channel when the task was submitted (events go there too): no client
    # lookup when a relay is written.
    channel: Mapped[str | None] = mapped_column(String(16))
    vendor_job_id: Mapped[str | None] = mapped_column(String(200))  # never shown to clients
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_fingerprint: Mapped[str | None] = mapped_column(String(64))
    acceptance_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime)
    execution_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime)
    on_deadline: Mapped[str] = mapped_column(String(16), default="escalate")
    acceptance_escalated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    execution_escalated_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Heartbeats (docs/design.md §7): no vendor event for ``heartbeat_timeout_s`` (the task's, or
    # its provider's default, fixed at submit) asks the vendor. ``last_event_at`` is stamped by
    # every verified vendor event for the task; ``heartbeat_due_at`` is when silence becomes due
    # (null: no heartbeat kept, or a check is out), so the beat query reads only an index.
    heartbeat_timeout_s: Mapped[int | None] = mapped_column()
    last_event_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    heartbeat_due_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Polling (docs/design.md §5, a provider's ``POLL_SCHEDULE_S``): when the vendor is next asked
    # about the job (null: not polled), and how many polls were made so far (the schedule's step).
    poll_due_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    polls: Mapped[int] = mapped_column(default=0, server_default="0")
    # Last time anything happened to the task or reconciliation asked the vendor about it.
    checked_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    attempts: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # The task's callback counter: the sequence of its latest relay (0 before the first). Written
    # with the state change that causes a relay, under the task's row lock (core/ordering.py).
    relay_seq: Mapped[int] = mapped_column(default=0, server_default="0")
    # The message id of its latest ``task.completed``: a later completion (a replay reopened the
    # task) says that it supersedes it.
    completion_message_id: Mapped[str | None] = mapped_column(String(64))
    # Its latest ``task.progress`` relay: a newer report replaces that one's content while it is unsent.
    progress_outbox_id: Mapped[int | None] = mapped_column(Id)
    # Fair dispatch (issue 20, service.dispatch): 1 (most urgent) to 5; an optional key of which at
    # most the client's ``concurrency_key_limit`` tasks are open at the vendor at once; when the
    # task was released to the broker (null while it waits in the database), the moment it ranks
    # at in its client's queue, and why it waits (core.fair_share.REASONS).
    priority: Mapped[int] = mapped_column(default=3, server_default="3")
    concurrency_key: Mapped[str | None] = mapped_column(String(200))
    dispatched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    dispatch_rank: Mapped[datetime | None] = mapped_column(UtcDateTime)
    wait_reason: Mapped[str | None] = mapped_column(String(32))
    # The W3C traceparent the task was submitted in (core.trace_context; issue 22): with tracing on,
    # the submit's own server span; off, the caller's header as received. Every span Liaison makes
    # for the task continues it, and vendor calls and callbacks carry it.
    traceparent: Mapped[str | None] = mapped_column(String(55))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)

    client: Mapped[Client] = relationship()
    events: Mapped[list[TaskEvent]] = relationship(
        back_populates="task", order_by="TaskEvent.id", cascade="all, delete-orphan"
    )

    def __repr__(self) -> str:
        return f"<ExternalTask {self.correlation_id} {self.state}>"


class TaskEvent(Base):
    """The task's audit trail: every request, attempt, event and callback, in order."""

    __tablename__ = "task_events"
    __table_args__ = (_partial("ix_task_events_finished", "at", predicate=FINISHED_EVENTS),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("external_tasks.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)

    task: Mapped[ExternalTask] = relationship(back_populates="events")
