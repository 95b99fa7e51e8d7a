"""liaison.probe: before a deadline or heartbeat escalation, ask the vendor for the job's status
(the same ``status`` call reconciliation makes, through the provider's shared rate limit).

A final answer is applied as if its webhook had come (a dropped completion costs no false
escalation, and no needless cancel); an open job is escalated, or for a heartbeat watched again;
a vendor that cannot be asked is escalated, and the escalation says so. Every call failure is
settled that way, never retried: the escalation is what the domain app waits for.
"""

from __future__ import annotations

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.deadlines import VendorAnswer, answer_of
from core.errors import CallError, PermanentError
from core.retry_policy import RetryPolicy
from models.base import utcnow
from models.messages import OutboxMessage
from runtime.context import Liaison, liaison
from runtime.provider import JobSnapshot
from service.probes import lock_task_without_payload, settle_probe, skip_probe
from workers.providers import Provider
from workers.tasks.attempt import Attempt, run
from workers.tasks.job_status_call import JobStatusCall

NOT_FOUND = 404
#: a probe that ran into its time limit is tried again once, then dead-lettered for a person
PROBE_POLICY = RetryPolicy(max_attempts=2, base_s=5.0)


@shared_task(bind=True, name="liaison.probe", max_retries=None)
def probe(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, Probe())


class Probe(JobStatusCall):
    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[tuple[Provider, str]] | str:
        task, now = self.task, utcnow()
        assert task is not None  # claimed with its row
        if (skipped := skip_probe(session, row, task, now)) is not None:
            return skipped
        provider = ctx.providers.get(task.provider)
        if task.vendor_job_id is None or provider is None:
            answer = VendorAnswer.NO_JOB if task.vendor_job_id is None else VendorAnswer.UNREACHABLE
            note = None if provider is not None else f"provider {task.provider!r} is not configured"
            return settle_probe(session, row, task, answer, now, note=note)
        return Attempt((provider, task.vendor_job_id), PROBE_POLICY, provider=task.provider)

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
        assert self.task is not None  # claimed with its row
        now = utcnow()
        answer = answer_of(result.status)  # the provider checked it is one of the contract's
        return settle_probe(session, row, self.task, answer, now, status=result.status, outcome=result.outcome)

    def settles(self, exc: CallError) -> bool:
        return True  # whatever the failure, the escalation goes ahead and says so

    def settle(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[tuple[Provider, str]], exc: CallError
    ) -> str:
        assert row.task_id is not None  # a probe's row always names its task
        task, now = lock_task_without_payload(session, row.task_id), utcnow()  # only the row was claimed here
        unknown = isinstance(exc, PermanentError) and exc.status == NOT_FOUND
        answer = VendorAnswer.UNKNOWN_JOB if unknown else VendorAnswer.UNREACHABLE
        return settle_probe(session, row, task, answer, now, note=str(exc))
