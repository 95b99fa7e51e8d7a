"""liaison.submit: hand a task to its external system, exactly once."""

from __future__ import annotations

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from workers.runtime import Liaison, liaison
from foundation import metrics
from models import service
from models.base import utcnow
from core.classify import Fault
from core.states import State
from webhooks.bounded_json import InvalidJson
from core.classify import Failure
from core.errors import PermanentError, TransientError, UncertainError
from workers.limiter import RateLimited
from workers.providers import SubmitJob
from core.retry_policy import RetryPolicy
from workers.policies import provider_policy
from workers.tasks.outcomes import provider_of, retry_or_dead_letter, start_delivery, time_limit_reached, wait_for_slot


@shared_task(bind=True, name="liaison.submit", max_retries=None)
def submit(self: Task, outbox_id: int) -> str:
    ctx = liaison()
    try:
        return _submit(self, ctx, outbox_id)
    except SoftTimeLimitExceeded:
        provider_name, deadline = provider_of(ctx, outbox_id)
        ps = ctx.settings.providers.get(provider_name or "")
        policy = provider_policy(ps) if ps else RetryPolicy()
        return time_limit_reached(self, ctx, outbox_id, policy, deadline=deadline, provider=provider_name)


def _submit(self: Task, ctx: Liaison, outbox_id: int) -> str:
    if not start_delivery(ctx, outbox_id):
        return "skipped"
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        task = service.lock_task(session, row.task_id)
        if task.state != State.REQUESTED:
            # Canceled before it reached the vendor, or an earlier delivery already submitted it.
            service.mark_done(session, row, utcnow(), "submit.skipped", reason=f"task is {task.state}")
            return "skipped"
        provider_name, deadline, reference = task.provider, task.execution_deadline, task.reference
        try:
            job_input = service.stored_input(session, task.id, ctx.settings.input_limits)
        except InvalidJson as refused:
            # Stored before the input limits existed (the API refuses such input now): no retry can
            # help, only the caller can, by sending an input within the limits. So: the caller's.
            bad_input = PermanentError(f"input refused: {refused}")
        else:
            bad_input = None
    if bad_input is not None:
        return retry_or_dead_letter(self, ctx, outbox_id, bad_input, RetryPolicy(), fault=Fault.CALLER)
    job = SubmitJob(reference, job_input)  # never the correlation id: two clients may share one

    provider = ctx.providers.get(provider_name)
    if provider is None:  # configuration changed after the task was accepted
        exc = PermanentError(f"provider {provider_name!r} is not configured")
        return retry_or_dead_letter(self, ctx, outbox_id, exc, RetryPolicy(), fault=exc.fault())
    policy = provider_policy(ctx.settings.providers[provider_name])
    try:
        try:
            job_id = provider.submit(job)
        except UncertainError as exc:
            # The vendor may have created the job: ask before trying again, so it never runs twice.
            try:
                job_id = provider.find(job.reference)
            except PermanentError as refused:
                # find carries nothing of the caller's: refusing it breaks the vendor's contract.
                raise PermanentError(
                    f"find: {refused}", status=refused.status, failure=Failure.BAD_RESPONSE
                ) from None
            if job_id is None:
                raise TransientError(f"{exc}; the vendor has no job for this reference") from None
    except RateLimited as exc:
        # Before submit (nothing sent), or before find after an uncertain submit: the retry asks
        # again from the top, and the vendor's Idempotency-Key makes a repeated submit harmless.
        return wait_for_slot(self, ctx, outbox_id, exc)
    except PermanentError as exc:
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=exc.fault(), provider=provider_name)
    except TransientError as exc:
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=exc.fault(), deadline=deadline,
                                    provider=provider_name)

    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        rows = service.record_submission(session, row, job_id, utcnow())
    ctx.publisher.publish(rows)
    metrics.submission(provider_name, "submitted")
    return "submitted"
