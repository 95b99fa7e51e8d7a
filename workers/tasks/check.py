"""liaison.check: ask the vendor for one job's status and apply what it says (``service.checks``):
a ``confirm`` hint's check, or a poll. The same ``status`` call reconciliation and probes make, on
the calls queue, through the provider's shared rate limit (a call refused its slot waits for it,
costing no attempt) and its share of the calls process's threads.

A failed call is not retried: a check is cheap to ask for again, and the next hint, poll or
reconciliation does.
"""

from __future__ import annotations

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.errors import CallError, PermanentError
from core.retry_policy import RetryPolicy
from core.states import TERMINAL
from foundation import metrics
from models.base import utcnow
from models.messages import OutboxMessage
from runtime.context import Liaison, liaison
from runtime.provider import JobSnapshot
from service import checks
from service.probes import lock_task_without_payload
from workers.providers import Provider
from workers.tasks.attempt import Attempt, run
from workers.tasks.job_status_call import JobStatusCall

NOT_FOUND = 404
#: a check that ran into its time limit is tried once more, then dead-lettered for a person
CHECK_POLICY = RetryPolicy(max_attempts=2, base_s=5.0)


@shared_task(bind=True, name="liaison.check", max_retries=None)
def check(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, Check())


class Check(JobStatusCall):
    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[tuple[Provider, str]] | str:
        task, now = self.task, utcnow()
        assert task is not None  # claimed with its row
        provider = ctx.providers.get(task.provider)
        if task.state in TERMINAL:
            return checks.skip_check(session, row, f"task is {task.state}", now)
        if task.vendor_job_id is None or provider is None:
            return checks.skip_check(
                session, row, "no job to ask about" if provider else "provider not configured", now
            )
        return Attempt((provider, task.vendor_job_id), CHECK_POLICY, provider=task.provider)

    def call(self, ctx: Liaison, attempt: Attempt[tuple[Provider, str]]) -> JobSnapshot:
        provider, job_id = attempt.work
        return provider.status(job_id)

    def record(
        self,
        ctx: Liaison,
        session: Session,
        row: OutboxMessage,
        attempt: Attempt[tuple[Provider, str]],
        result: JobSnapshot,
    ) -> str:
        task = self.task
        assert task is not None  # claimed with its row
        outcome = checks.settle_check(session, row, task, result.status, result.outcome, utcnow())
        if row.payload.get("reason") == checks.POLL and task.state in TERMINAL:
            metrics.polled_job_finished(task.provider, task.polls)
        return outcome

    def settles(self, exc: CallError) -> bool:
        return True  # never retried: the next hint or poll asks again

    def settle(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[tuple[Provider, str]], exc: CallError
    ) -> str:
        assert row.task_id is not None  # a check's row always names its task
        task = lock_task_without_payload(session, row.task_id)  # only the row was claimed here
        unknown = isinstance(exc, PermanentError) and exc.status == NOT_FOUND
        return checks.check_failed(session, row, task, str(exc), unknown, utcnow())
