"""liaison.submit: hand a task to its external system."""

from __future__ import annotations

from celery import Task, shared_task

from app.extensions import liaison
from models import service
from models.base import utcnow
from models.states import State
from models.task import ExternalTask
from workers.errors import PermanentError, TransientError, UncertainError
from workers.providers import SubmitJob
from workers.retry_policy import RetryPolicy
from workers.tasks.outcomes import retry_or_dead_letter


@shared_task(bind=True, name="liaison.submit")
def submit(self: Task, outbox_id: int) -> str:
    ctx = liaison()
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        task = session.get(ExternalTask, row.task_id)
        if task is None or task.state != State.REQUESTED or task.provider not in ctx.providers:
            reason = "task gone" if task is None else (
                f"task is {task.state}" if task.state != State.REQUESTED else "provider not configured"
            )
            if task is not None and task.state == State.REQUESTED:
                rows = service.dead_letter(session, row, reason, "system", utcnow())
            else:
                rows = []
                service.mark_done(session, row, utcnow(), "submit.skipped", reason=reason)
        else:
            job = SubmitJob(task.correlation_id, task.input)
            provider = ctx.providers[task.provider]
            deadline = task.execution_deadline
            rows = None
    if rows is not None:
        ctx.publisher.publish(rows)
        return "skipped"

    ps = ctx.settings.providers[provider.name]
    policy = RetryPolicy(
        max_attempts=ps.submit_max_attempts, base_s=ps.submit_backoff_base_s, cap_s=ps.submit_backoff_cap_s
    )
    try:
        try:
            job_id = provider.submit(job)
        except UncertainError as exc:
            # The vendor may have created the job: ask before trying again, so it never runs twice.
            job_id = provider.find(job.correlation_id)
            if job_id is None:
                raise TransientError(f"{exc} (not found by reference)") from None
    except PermanentError as exc:
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault="caller")
    except TransientError as exc:
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault="system", deadline=deadline)

    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        rows = service.record_submission(session, row, job_id, utcnow())
    ctx.publisher.publish(rows)
    return "submitted"
