"""liaison.cancel: ask the external system to stop a job. The task ends ``canceled`` when the vendor
confirms (its webhook, or reconciliation), not when we ask."""

from __future__ import annotations

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.classify import Fault
from core.errors import CallError, PermanentError
from core.retry_policy import RetryPolicy
from models.base import utcnow
from models.messages import OutboxMessage
from runtime.context import Liaison, liaison
from service import claims, transitions
from workers.policies import provider_policy
from workers.providers import Provider
from workers.tasks.attempt import Attempt, run
from workers.tasks.outcomes import provider_of
from workers.tasks.vendor_call import VendorCall

CONFLICT = 409  # the job finished before our cancel reached it; its completion will arrive


@shared_task(bind=True, name="liaison.cancel", max_retries=None)
def cancel(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, Cancel())


class Cancel(VendorCall[str, None]):
    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        row = claims.claim_outbox(session, outbox_id)
        if row is not None and stage == "start":
            assert row.task_id is not None  # a cancellation's row always names its task
            self.task = claims.lock_task(session, row.task_id)  # its vendor's call slot is taken next
            self.traceparent = self.task.traceparent
        return row

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[tuple[Provider, str]] | str:
        task = self.task
        assert task is not None  # claimed with its row
        if task.vendor_job_id is None:
            transitions.mark_done(session, row, utcnow(), "cancel.skipped", reason="the vendor has no job")
            return "skipped"
        ps = ctx.settings.providers.get(task.provider)
        policy = provider_policy(ps) if ps else RetryPolicy()
        provider = ctx.providers.get(task.provider)
        if provider is None:
            return Attempt(
                None,  # type: ignore[arg-type]  # refused: no call, so no work to carry
                policy,
                refused=PermanentError(f"provider {task.provider!r} is not configured"),
                refused_fault=Fault.SYSTEM,
            )
        return Attempt((provider, task.vendor_job_id), policy)

    def call(self, ctx: Liaison, attempt: Attempt[tuple[Provider, str]]) -> None:
        provider, job_id = attempt.work
        provider.cancel(job_id)

    def record(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[tuple[Provider, str]], result: None
    ) -> str:
        transitions.mark_done(session, row, utcnow(), "cancel.sent")
        return "sent"

    def settles(self, exc: CallError) -> bool:
        return isinstance(exc, PermanentError) and exc.status == CONFLICT

    def settle(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[tuple[Provider, str]], exc: CallError
    ) -> str:
        transitions.mark_done(session, row, utcnow(), "cancel.too_late", error=str(exc))
        return "too_late"

    def fault(self, attempt: Attempt[tuple[Provider, str]], exc: CallError) -> str:
        # A cancel carries nothing of the caller's, only the job id the vendor gave us: whatever the
        # vendor refuses about it (say, 404 for its own job) is for us to look at, not the caller.
        return Fault.SYSTEM if isinstance(exc, PermanentError) else exc.fault()

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        ps = ctx.settings.providers.get(provider_of(ctx, outbox_id)[0] or "")
        return Attempt(None, provider_policy(ps) if ps else RetryPolicy())
