"""The one shape of an outbox task (submit, relay, cancel): start → call → record.

1. **start**, one transaction: lock the outbox row (nothing to do once it is done, or when this copy
   of its message was superseded by a later publication: ``service.start_leases``), let the task
   admit it (the relay waits here for an earlier relay of its task, or takes one of its client's
   slots; a vendor call takes one of its vendor's call slots: ``workers.tasks.vendor_call``; before
   anything is counted), count the
   delivery (the poison guard: past ``LIAISON_MAX_DELIVERIES`` starts that never finished, it is
   dead-lettered unrun) with its start lease renewed (in the same write), and read what the call
   needs — or finish the row at once (nothing to do, an endpoint disabled). Last, what the call
   takes in that transaction (``before_call``: a vendor's rate slot, with the database limiter).
   Committed before the call, so a call that kills
   its worker is counted.
   A vendor submission's claim counts the delivery in its locking statement on PostgreSQL, and a
   relay's admit in the statement that takes its slots (``counted_by_claim``): a submission's admit
   only ever waits, and the rollback of a wait takes the count back.
   A row whose work cannot be read rolls the start back and is counted in a transaction of its
   own: a savepoint would do the same at two statements for every delivery, not only for these.
2. **call**, outside any transaction: no row lock or connection is held across the network.
3. **record**, one transaction: lock the row again and, unless another delivery of the same message
   finished it meanwhile (a sweep re-publish, a broker redelivery), record the outcome: done (and
   whatever it causes), a failed attempt retried or held (``outcomes.retry_or_dead_letter``), a wait
   for a provider slot (``outcomes.wait_for_slot``), or a dead letter.

So a delivery touches its outbox row in two transactions, the fewest correctness allows: the count
must be durable before the call, and the outcome can only be known after it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from core.errors import CallError
from core.retry_policy import RetryPolicy
from foundation import tracing
from foundation.logging import bind
from models.base import utcnow
from models.db import database_unavailable
from models.messages import OutboxMessage
from models.store import store_of
from runtime.context import Liaison
from runtime.limiter import RateLimited
from service import claims, start_leases
from service.dead_letters import count_delivery
from workers.tasks.outcomes import retry_or_dead_letter, time_limit_reached, wait_for_slot

log = logging.getLogger(__name__)
#: Seconds before a task the database did not answer tries again, doubling up to the cap.
DB_RETRY_S = 1.0
DB_RETRY_CAP_S = 30.0
W = TypeVar("W")
R = TypeVar("R")


@dataclass(frozen=True)
class Attempt(Generic[W]):
    """What the start transaction read: the call's input, and how a failure of the call is treated."""

    work: W
    policy: RetryPolicy
    deadline: datetime | None = None  # no retry is scheduled past it
    provider: str | None = None  # named in the failed-attempt metric
    callers_endpoint: bool = False  # the call goes to the caller's endpoint (a relay): whose fault a timeout is
    #: known without calling (an input past its limits, a provider no longer configured): recorded
    #: as a failed attempt with ``refused_fault``, no call made
    refused: CallError | None = None
    refused_fault: str | None = None


class ComeBackLater(Exception):
    """Raised by ``admit`` to leave the message for later, nothing counted (e.g. no relay slot free)."""

    def __init__(self, countdown: float, outcome: str) -> None:
        super().__init__(outcome)
        self.countdown = countdown
        self.outcome = outcome


class Superseded(Exception):
    """This copy of the message does nothing: its row was published again since (its start lease ran
    out) or went back to its queue (``service.start_leases.superseded``). Nothing is counted."""


class OutboxTask(Generic[W, R]):
    """The steps one kind of outbox task fills in; :func:`run` is the skeleton around them."""

    #: the start counted the delivery in a statement of its own: ``claim`` (a vendor submission, in
    #: the statement that locks its row) or ``admit`` (a relay, with its slots: it sets this then)
    counted_by_claim = False
    #: The task's stored W3C traceparent, set by ``claim``: the call and its record run in a span
    #: of the task's trace (``foundation.tracing.continued``), and the call carries it.
    traceparent: str | None = None
    #: Set by ``call`` when it was rate-limited after a request that went unanswered (a submit's
    #: ``find``): the wait for the slot records that the other side may have acted on it.
    unsettled = False

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        """Lock the row at ``stage`` ("start" or "record"); None once it is done. A task that reads
        more rows there may lock and load them in the same statement (one round trip, not two)."""
        return claims.claim_outbox(session, outbox_id)

    def admit(self, ctx: Liaison, session: Session, row: OutboxMessage) -> str | None:
        """Before the delivery is counted; raise :class:`ComeBackLater` to come back later, or return
        an outcome to end the start there, committed, nothing counted (a relay held for an earlier
        one of its task)."""
        return None

    def release(self, ctx: Liaison) -> None:
        """After the delivery, whatever happened (give back what ``admit`` took)."""

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[W] | str:
        """In the start transaction: what the call needs, or an outcome (the row finished here)."""
        raise NotImplementedError

    def before_call(self, ctx: Liaison, session: Session, attempt: Attempt[W]) -> Attempt[W]:
        """Last in the start transaction, once a call will be made: what the call takes in it (a
        vendor call its rate slot: ``workers.tasks.vendor_call``); raise ``RateLimited`` to roll the
        start back, nothing counted."""
        return attempt

    def call(self, ctx: Liaison, attempt: Attempt[W]) -> R:
        """The outbound call; raises ``CallError`` or ``RateLimited``."""
        raise NotImplementedError

    def record(self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[W], result: R) -> str:
        """In the record transaction: the call succeeded."""
        raise NotImplementedError

    def succeeded(self, ctx: Liaison, session: Session, outbox_id: int, attempt: Attempt[W], result: R) -> str:
        """The record transaction of a call that succeeded: the row claimed again and, unless
        another delivery finished it meanwhile, :meth:`record`. A task whose record can lock the
        row and write its first rows in one statement overrides this (a relay on PostgreSQL)."""
        row = self.claim(ctx, session, outbox_id, "record")
        return "done" if row is None else self.record(ctx, session, row, attempt, result)

    def settles(self, exc: CallError) -> bool:
        """True for a failure this task records itself (:meth:`settle`), not by the retry policy."""
        return False

    def settle(self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[W], exc: CallError) -> str:
        raise NotImplementedError

    def fault(self, attempt: Attempt[W], exc: CallError) -> str:
        return exc.fault(callers_endpoint=attempt.callers_endpoint)

    def note_failure(self, ctx: Liaison, session: Session, attempt: Attempt[W], exc: CallError) -> None:
        """In the transaction that records a failed call (retried or dead-lettered): what else the
        failure says (a relay counts it against its endpoint's health)."""

    def retry_permanent(self, exc: CallError) -> bool:
        """Retry even a permanent failure (a relay's 4xx: the caller's endpoint may be fixed)."""
        return False

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[Any]:
        """The retry terms when the time limit cut the task off before its start transaction ended."""
        return Attempt(None, RetryPolicy())


def run(task: Task, ctx: Liaison, outbox_id: int, steps: OutboxTask[Any, Any], published: str | None = None) -> str:
    """Start → call → record, with every way out handled the same for each kind of task.
    ``published``: the stamp the message was published under (a submit's and a relay's), which a
    copy the row was published again since no longer carries."""
    attempt: Attempt[Any] | None = None
    try:
        started = _start(ctx, outbox_id, steps, published)
        if isinstance(started, str):
            return started
        attempt = started
        with tracing.continued(steps.traceparent, f"{task.name} attempt", outbox_id=outbox_id):
            return _attempt(task, ctx, outbox_id, steps, attempt)
    except SoftTimeLimitExceeded:
        terms = attempt or steps.fallback(ctx, outbox_id)
        return time_limit_reached(
            task,
            ctx,
            outbox_id,
            terms.policy,
            callers_endpoint=terms.callers_endpoint,
            deadline=terms.deadline,
            provider=terms.provider,
        )
    except ComeBackLater as wait:
        raise task.retry(countdown=wait.countdown) from None
    except Superseded:
        log.info("outbox %s: this copy of its message was superseded by a later one; nothing to do", outbox_id)
        return "superseded"
    except RateLimited as exc:  # the start's rate slot (``before_call``): the start rolled back
        return wait_for_slot(task, ctx, outbox_id, exc)
    except (DBAPIError, PoolTimeout) as exc:
        if not database_unavailable(exc):
            raise
        # The database is restarting, the connection died under the task (a failover: every pooled
        # connection is discarded with it), or every pooled connection was busy past the pool's
        # timeout: the next try starts afresh, a moment later and then less often while it stays
        # so. The outbox row is as its last commit left it; nothing else is counted. (Acked as a
        # failure instead, the row would wait for the lease.)
        countdown = min(DB_RETRY_CAP_S, DB_RETRY_S * 2 ** (task.request.retries or 0))
        log.warning("outbox %s: the database is not answering; trying again in %.0fs", outbox_id, countdown)
        raise task.retry(countdown=countdown) from None
    finally:
        steps.release(ctx)


def _attempt(task: Task, ctx: Liaison, outbox_id: int, steps: OutboxTask[Any, Any], attempt: Attempt[Any]) -> str:
    """The call and its record (or the failure's), after the start transaction."""
    if attempt.refused is not None:
        return retry_or_dead_letter(
            task,
            ctx,
            outbox_id,
            attempt.refused,
            RetryPolicy(),
            fault=attempt.refused_fault or attempt.refused.fault(),
        )
    try:
        result = steps.call(ctx, attempt)
    except RateLimited as exc:
        return wait_for_slot(task, ctx, outbox_id, exc, unsettled=steps.unsettled)
    except CallError as exc:
        return _failed(task, ctx, outbox_id, steps, attempt, exc)
    with ctx.db.transaction() as session:
        return steps.succeeded(ctx, session, outbox_id, attempt, result)


def _start(ctx: Liaison, outbox_id: int, steps: OutboxTask[Any, Any], published: str | None) -> Attempt[Any] | str:
    preparing = False
    try:
        with ctx.db.transaction() as session:
            row = steps.claim(ctx, session, outbox_id, "start")
            if row is None:
                return "skipped"
            if start_leases.superseded(row, published):
                raise Superseded  # rolled back: a count the claim made goes with it
            bind(attempt=row.attempts + 1)  # the row counts attempts; a held retry is a new Celery message
            # may raise ComeBackLater: the transaction rolls back, nothing counted (a count the
            # claim made goes with it); an outcome it returns must not follow a counting claim
            admitted = steps.admit(ctx, session, row)
            if admitted is not None:
                return admitted
            now = utcnow()
            if not count_delivery(session, row, ctx.settings.max_deliveries, now, counted=steps.counted_by_claim):
                log.error("outbox %s dead-lettered as poison: it never finished a delivery", outbox_id)
                return "skipped"
            if not steps.counted_by_claim and (lease := ctx.settings.start_leases.get(row.kind)) is not None:
                store_of(session).outbox.lease_start(row, start_leases.until(now, lease))  # in the count's UPDATE
            preparing = True
            with session.no_autoflush:  # the count and what prepare writes go in one UPDATE at commit
                prepared = steps.prepare(ctx, session, row)
                preparing = False
                if isinstance(prepared, str) or prepared.refused is not None:
                    return prepared
                # may raise RateLimited: rolled back, nothing counted (run waits for the slot)
                return steps.before_call(ctx, session, prepared)
    except Exception:
        if not preparing:
            raise
        # A row whose work cannot even be read fails this delivery, counted (everything prepare
        # wrote rolled back with it): it cannot loop unseen, and after LIAISON_MAX_DELIVERIES such
        # starts it is dead-lettered as poison.
        _count_failed_start(ctx, outbox_id)
        raise


def _count_failed_start(ctx: Liaison, outbox_id: int) -> None:
    with ctx.db.transaction() as session:
        row = claims.claim_outbox(session, outbox_id)
        if row is not None:
            count_delivery(session, row, ctx.settings.max_deliveries, utcnow())


def _failed(
    task: Task, ctx: Liaison, outbox_id: int, steps: OutboxTask[Any, Any], attempt: Attempt[Any], exc: CallError
) -> str:
    if steps.settles(exc):
        with ctx.db.transaction() as session:
            row = claims.claim_outbox(session, outbox_id)
            return "done" if row is None else steps.settle(ctx, session, row, attempt, exc)
    return retry_or_dead_letter(
        task,
        ctx,
        outbox_id,
        exc,
        attempt.policy,
        fault=steps.fault(attempt, exc),
        deadline=attempt.deadline,
        retry_permanent=steps.retry_permanent(exc),
        provider=attempt.provider,
        also=lambda session: steps.note_failure(ctx, session, attempt, exc),
    )
