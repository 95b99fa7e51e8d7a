"""The one adapter from our error tree onto Celery: retry with a countdown, hold, or dead-letter.

Tasks catch ``core.errors``; this module asks the pure retry policy what comes next. Attempts
are counted in the outbox row (not ``request.retries``), so the count survives a sweep, a replay or
a lost message. A wait up to ``max_countdown_s`` is Celery's ``retry(countdown=…)``; a longer one is
held in the database and re-published by the outbox sweep when due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from random import Random
from typing import cast

from celery import Task
from sqlalchemy.orm import Session

from core.classify import Failure
from core.deadlines import RetryAtDeadline, passes_deadline
from core.errors import CallError, PermanentError, TransientError
from core.retry_policy import RetryPolicy, next_delay, retry_after_past_cap
from foundation import metrics
from models.base import utcnow
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from runtime.context import Liaison
from runtime.limiter import RateLimited
from service import claims, start_leases, transitions
from service.dead_letters import dead_letter
from service.lifecycle import note_unsettled, retry_past_deadline_of

log = logging.getLogger(__name__)
_rng = Random()


def time_limit_error(soft_limit_s: float | None) -> TransientError:
    """What a ``SoftTimeLimitExceeded`` means for the outbox row: a failed attempt, retried per policy
    like a timeout after sending (the other side may have acted on it; the next attempt carries the
    same Idempotency-Key / webhook-id, so it is safe to repeat)."""
    limit = f" ({soft_limit_s:g}s)" if soft_limit_s else ""
    return TransientError(f"the attempt ran past its soft time limit{limit}", failure=Failure.READ_TIMEOUT)


def provider_of(ctx: Liaison, outbox_id: int) -> tuple[str | None, datetime | None]:
    """(provider, execution deadline) of an outbox row's task: what a time-limited attempt's retry
    policy needs when the task body was cut off before it read them."""
    with ctx.db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        task = session.get(ExternalTask, row.task_id) if row is not None and row.task_id is not None else None
        return (task.provider, task.execution_deadline) if task is not None else (None, None)


def time_limit_reached(
    task: Task,
    ctx: Liaison,
    outbox_id: int,
    policy: RetryPolicy,
    *,
    callers_endpoint: bool = False,
    deadline: datetime | None = None,
    provider: str | None = None,
) -> str:
    """The task caught ``SoftTimeLimitExceeded``: record the failed attempt before the hard limit kills
    the process, so the work is retried per policy rather than left for the sweep's lease."""
    exc = time_limit_error(task.soft_time_limit)
    log.warning("outbox %s: %s", outbox_id, exc)
    return retry_or_dead_letter(
        task,
        ctx,
        outbox_id,
        exc,
        policy,
        fault=exc.fault(callers_endpoint=callers_endpoint),
        deadline=deadline,
        provider=provider,
    )


def retry_or_dead_letter(
    task: Task,
    ctx: Liaison,
    outbox_id: int,
    exc: CallError,
    policy: RetryPolicy,
    *,
    fault: str,
    deadline: datetime | None = None,
    retry_permanent: bool = False,
    provider: str | None = None,
    also: Callable[[Session], None] | None = None,
) -> str:
    """Schedule the next attempt, or write the dead letter when the policy says stop; ``also`` runs
    in the same transaction (what else the failure changes)."""
    now = utcnow()
    canceled = False
    with ctx.db.transaction() as session:
        row = claims.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        if also is not None:
            also(session)
        store_of(session).outbox.delivery_ended(row)  # its outcome ``exc``: no longer under way
        if row.kind == OutboxKind.SUBMIT and exc.unanswered:
            note_unsettled(row)  # the vendor may hold a job: a cancel must ask it first (request_cancel)
        failed_attempts = row.attempts + 1
        kind = row.kind
        delay = None
        if retry_permanent or not isinstance(exc, PermanentError):
            # The budget decides whether to retry; the deadline only whether to escalate first.
            delay = next_delay(
                failed_attempts,
                policy,
                _rng,
                elapsed_s=(now - row.created_at).total_seconds(),
                retry_after_s=exc.retry_after_s,
            )
        if (
            delay is not None
            and row.task_id is not None
            and deadline is not None
            and passes_deadline(delay, (deadline - now).total_seconds())
            # escalates once (and keeps the budget), or cancels the task (docs/design.md §6)
            and retry_past_deadline_of(session, row, now) is RetryAtDeadline.CANCEL
        ):
            transitions.mark_done(session, row, now, f"{kind}.canceled", reason="execution deadline exceeded")
            canceled = True
        elif delay is None:
            error = str(exc)
            if retry_after_past_cap(policy, exc.retry_after_s):
                error = f"{exc}; its Retry-After ({exc.retry_after_s:.0f}s) is past the retry cap ({policy.cap_s:.0f}s)"
            dead_letter(session, row, error, fault, now, answer=exc.answer)
        else:
            due = now + timedelta(seconds=delay)
            transitions.record_attempt_failure(session, row, str(exc), due, now)
            held = delay > ctx.settings.max_countdown_s
            if held:
                store_of(session).outbox.hold_until(row, due)  # the sweep publishes it when due
            else:  # the retry's message must start by its due time plus the lease (service.start_leases)
                lease_until = start_leases.until(due, ctx.settings.start_leases.get(row.kind))
                store_of(session).outbox.lease_start(row, lease_until)
    if canceled:
        log.info("outbox %s: the next attempt would start after the execution deadline; task canceled", outbox_id)
        return "canceled"
    metrics.failed_attempt(cast(metrics.RetryKind, kind), dead_lettered=delay is None, provider=provider)
    if delay is None:
        log.warning("dead-lettered outbox %s after %d attempts: %s", outbox_id, failed_attempts, exc)
        return "dead_lettered"
    if held:
        log.info(
            "attempt %d of outbox %s failed; next in %.0fs, held in the database", failed_attempts, outbox_id, delay
        )
        return "held"
    log.info("attempt %d of outbox %s failed, retrying in %.1fs: %s", failed_attempts, outbox_id, delay, exc)
    # The task is declared max_retries=None: our policy, not Celery's default of 3, decides when to stop.
    raise task.retry(countdown=delay, exc=exc)


def wait_for_slot(task: Task, ctx: Liaison, outbox_id: int, exc: RateLimited, *, unsettled: bool = False) -> str:
    """The provider's shared rate limit had no slot soon enough: nothing was sent, so no attempt is
    counted. The message comes back after the slot's wait plus jitter (so the waiting messages do
    not all return at once); a wait past ``max_countdown_s`` is held in the database instead.
    ``unsettled``: the slot was for the ``find`` after an unanswered submit, so the vendor may hold
    a job meanwhile (``service.lifecycle.note_unsettled``)."""
    delay = exc.retry_after_s + _rng.uniform(0.0, max(exc.retry_after_s, 0.05))
    metrics.rate_limited("provider", exc.key.removeprefix("provider:"))
    with ctx.db.transaction() as session:
        row = claims.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        store_of(session).outbox.delivery_ended(row)  # ended normally: not a poison message
        if unsettled:
            note_unsettled(row)
        if row.kind == OutboxKind.SUBMIT and row.task_id is not None:
            transitions.note_rate_limited(session, row.task_id, utcnow())  # the task says why it waits
        held = delay > ctx.settings.max_countdown_s
        due = utcnow() + timedelta(seconds=delay)
        if held:
            store_of(session).outbox.hold_until(row, due)  # the sweep publishes it when due
        else:  # the message comes back by countdown: it must start by then plus the lease
            store_of(session).outbox.lease_start(row, start_leases.until(due, ctx.settings.start_leases.get(row.kind)))
    if held:
        log.info("outbox %s waits %.0fs for a provider slot, held in the database", outbox_id, delay)
        return "held"
    log.info("outbox %s waits %.2fs for a provider slot: %s", outbox_id, delay, exc)
    raise task.retry(countdown=delay, exc=exc)
