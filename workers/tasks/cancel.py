"""liaison.cancel: ask the external system to stop a job. The task ends ``canceled`` when the vendor
confirms (its webhook, or reconciliation), not when we ask."""

from __future__ import annotations

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from workers.runtime import Liaison, liaison
from models import service
from models.base import utcnow
from core.classify import Fault
from core.errors import PermanentError, TransientError
from workers.limiter import RateLimited
from core.retry_policy import RetryPolicy
from workers.policies import provider_policy
from workers.tasks.outcomes import provider_of, retry_or_dead_letter, start_delivery, time_limit_reached, wait_for_slot

CONFLICT = 409  # the job finished before our cancel reached it; its completion will arrive


@shared_task(bind=True, name="liaison.cancel", max_retries=None)
def cancel(self: Task, outbox_id: int) -> str:
    ctx = liaison()
    try:
        return _cancel(self, ctx, outbox_id)
    except SoftTimeLimitExceeded:
        ps = ctx.settings.providers.get(provider_of(ctx, outbox_id)[0] or "")
        return time_limit_reached(self, ctx, outbox_id, provider_policy(ps) if ps else RetryPolicy())


def _cancel(self: Task, ctx: Liaison, outbox_id: int) -> str:
    if not start_delivery(ctx, outbox_id):
        return "skipped"
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        task = service.lock_task(session, row.task_id)
        if task.vendor_job_id is None:
            service.mark_done(session, row, utcnow(), "cancel.skipped", reason="the vendor has no job")
            return "skipped"
        job_id, provider_name = task.vendor_job_id, task.provider

    provider = ctx.providers.get(provider_name)
    ps = ctx.settings.providers.get(provider_name)
    policy = provider_policy(ps) if ps else RetryPolicy()
    try:
        if provider is None:
            raise PermanentError(f"provider {provider_name!r} is not configured")
        provider.cancel(job_id)
    except RateLimited as exc:
        return wait_for_slot(self, ctx, outbox_id, exc)
    except PermanentError as exc:
        if exc.status == CONFLICT:
            with ctx.db.transaction() as session:
                if (row := service.claim_outbox(session, outbox_id)) is not None:
                    service.mark_done(session, row, utcnow(), "cancel.too_late", error=str(exc))
            return "too_late"
        # A cancel carries nothing of the caller's, only the job id the vendor gave us: whatever
        # the vendor refuses about it (say, 404 for its own job) is for us to look at, not the caller.
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=Fault.SYSTEM)
    except TransientError as exc:
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=exc.fault())

    with ctx.db.transaction() as session:
        if (row := service.claim_outbox(session, outbox_id)) is not None:
            service.mark_done(session, row, utcnow(), "cancel.sent")
    return "sent"
