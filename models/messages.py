"""Messages in and out: inbox dedup, transactional outbox, dead letters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, String, Text, UniqueConstraint, false, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, Id, Json, UtcDateTime, utcnow

#: The longest message id the inbox holds: every way in (webhooks, vendor queues, channel commands,
#: reconciliation) bounds its ids by it before it records them.
MAX_MESSAGE_ID_CHARS = 200


class ProcessedMessage(Base):
    """Inbox: a (source, message_id) seen once. The unique constraint is the deduplication."""

    __tablename__ = "processed_messages"
    __table_args__ = (UniqueConstraint("source", "message_id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    source: Mapped[str] = mapped_column(String(100))
    message_id: Mapped[str] = mapped_column(String(MAX_MESSAGE_ID_CHARS))
    message_type: Mapped[str] = mapped_column(String(64))
    processed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)


class OutboxKind:
    SUBMIT = "submit"
    CANCEL = "cancel"
    RELAY = "relay"
    NOTIFY = "notify"  # a message to people about incidents (models.notifications)
    #: ask the vendor for a job's status before a deadline or heartbeat escalation
    PROBE = "probe"
    #: an event for a domain app's broker channel (a task.* event, or a command's rejection)
    CHANNEL = "channel"
    #: ask the vendor for a job's status and apply what it says, nothing else: a ``confirm`` hint's
    #: check, or a poll (``service.checks``); at most one pending per task
    CHECK = "check"

    ALL = (SUBMIT, CANCEL, RELAY, NOTIFY, PROBE, CHANNEL, CHECK)


#: A task's pending status check: the predicate of the unique index that allows one at a time.
PENDING_CHECK = "kind = 'check' AND done_at IS NULL"


#: a dead letter is the outbox kind that failed, or ``poison`` (a message that never finished a
#: delivery, or that could not be decoded at all)
POISON = "poison"
DEAD_LETTER_KINDS = (*OutboxKind.ALL, POISON)


class OutboxMessage(Base):
    """Work a state change causes, committed with it and published to Celery after commit."""

    __tablename__ = "outbox_messages"
    __table_args__ = (
        # The sweep reads only rows that are not done, oldest first.
        Index("ix_outbox_messages_pending", "done_at", "dispatched_at", "id"),
        # One relay per place in its task's callback order; the index also finds a relay's
        # earlier siblings (core/ordering.py). Rows without a sequence (submit, cancel) are not unique.
        UniqueConstraint("task_id", "sequence"),
        # At most one pending status check per task, however many hints or polls ask for one
        # (service.checks): a flood of unsigned hints costs one vendor call at a time, not one each.
        Index(
            "ux_outbox_messages_pending_check",
            "task_id",
            unique=True,
            postgresql_where=text(PENDING_CHECK),
            sqlite_where=text(PENDING_CHECK),
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    # Stable across every retry and replay: the relay's webhook-id, the consumer's dedup key.
    message_id: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    task_id: Mapped[int | None] = mapped_column(Id, index=True)
    correlation_id: Mapped[str | None] = mapped_column(String(200))
    payload: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    attempts: Mapped[int] = mapped_column(default=0)  # calls made to the other system
    deliveries: Mapped[int] = mapped_column(default=0)  # times a worker started it (poison guard)
    # Set while the row must wait for a person (e.g. its callback endpoint answered 410 Gone);
    # the sweep leaves parked rows alone, and nothing is dropped.
    parked_reason: Mapped[str | None] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(2000))  # a relay's callback URL, once known
    # A relay's place in its task's callback order (1, 2, 3 …); None for submit and cancel rows.
    sequence: Mapped[int | None] = mapped_column()
    # A later relay of the task waits for this one: whatever settles it releases them.
    holds_back: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    dispatched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # When a scheduled retry is due: the sweep's lease runs from here, not from the publish.
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    done_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # A submit's or relay's start lease (service.start_leases): by then its message, published or
    # retried, should have started, and a started delivery should have ended (done, or a retry
    # scheduled). Past it, with the message still out (dispatched_at set), it is presumed lost with
    # its worker and the sweep re-drives it, long before LIAISON_OUTBOX_LEASE_S.
    start_lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)


#: What publishing an outbox row needs: not its payload (a relay's carries the vendor's outcome,
#: which beat jobs never load).
PUBLISH_COLUMNS = (
    OutboxMessage.id,
    OutboxMessage.kind,
    OutboxMessage.message_id,
    OutboxMessage.task_id,
    OutboxMessage.correlation_id,
    OutboxMessage.dispatched_at,
    OutboxMessage.next_attempt_at,
    OutboxMessage.start_lease_until,
)


class DeadLetter(Base):
    """Work that could not be done. Never evicted; replay keeps the original message_id."""

    __tablename__ = "dead_letters"
    __table_args__ = (
        # Retention: closed letters, oldest first; and "does this outbox row have an open letter?"
        # (a row with one is kept: replay needs it).
        Index("ix_dead_letters_closed_at", "closed_at"),
        Index(
            "ix_dead_letters_open_outbox",
            "outbox_id",
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # submit | cancel | relay | poison
    message_id: Mapped[str] = mapped_column(String(64), index=True)
    outbox_id: Mapped[int | None] = mapped_column(Id)
    provider: Mapped[str | None] = mapped_column(String(100))
    correlation_id: Mapped[str | None] = mapped_column(String(200), index=True)
    payload: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    error: Mapped[str] = mapped_column(Text)
    #: what the refusing side answered with its status: a bounded, redacted excerpt (core.reasons);
    #: kept apart from ``error``, which reaches logs and the task's ``last_error``
    answer: Mapped[str | None] = mapped_column(Text)
    fault: Mapped[str] = mapped_column(String(16))  # caller | system
    attempts: Mapped[int] = mapped_column(default=0)
    first_failed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_failed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="open", index=True)  # open|replayed|discarded
    replay_count: Mapped[int] = mapped_column(default=0)
    closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
