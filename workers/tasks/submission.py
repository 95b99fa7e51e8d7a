"""liaison.submit: hand a task to its external system, exactly once."""

from __future__ import annotations

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.classify import Failure, Fault
from core.errors import PermanentError, TransientError, UncertainError
from core.retry_policy import RetryPolicy
from core.states import State
from foundation import metrics
from models.base import utcnow
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask
from runtime.context import Liaison, liaison
from runtime.limiter import RateLimited
from service import callback_tokens, claims, lifecycle, polling, start_leases, transitions, vendor_events
from webhooks.schemes import TOKEN_URL
from wire.bounded_json import InvalidJson
from workers.policies import provider_policy
from workers.providers import Provider, SubmitJob
from workers.tasks.attempt import Attempt, run
from workers.tasks.outcomes import provider_of
from workers.tasks.vendor_call import VendorCall


@shared_task(bind=True, name="liaison.submit", max_retries=None)
def submit(self: Task, outbox_id: int, published: str | None = None) -> str:
    """``published``: the stamp the message went out under (``service.start_leases.superseded``)."""
    return run(self, liaison(), outbox_id, Submit(), published)


class Submit(VendorCall[SubmitJob, str | None]):
    counted_by_claim = True  # its admit only waits (ComeBackLater) or lets the delivery go

    def __init__(self) -> None:
        self.task: ExternalTask | None = None  # locked with the row, at each stage
        self.raw_input = "null"
        #: the task was canceled while the vendor had not answered its submit: this delivery only
        #: asks ``find`` whether the vendor holds a job (to cancel it there), and never submits
        self.settling = False

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        if stage == "start":
            lease_until = start_leases.until(utcnow(), ctx.settings.start_leases.get(OutboxKind.SUBMIT))
            claimed = claims.start_delivery(session, outbox_id, with_input=True, lease_until=lease_until)
        else:
            claimed = claims.claim_outbox_and_task(session, outbox_id)
        if claimed is None:
            return None
        row, self.task, raw_input = claimed
        self.traceparent = self.task.traceparent
        self.raw_input = raw_input or "null"
        return row

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[tuple[Provider, SubmitJob]] | str:
        task, raw_input = self.task, self.raw_input
        assert task is not None  # claimed with its row
        if task.state == State.CANCEL_REQUESTED and task.vendor_job_id is None:
            return self._settle(ctx, task)
        if task.state != State.REQUESTED:
            # Canceled before it reached the vendor, or an earlier delivery already submitted it.
            transitions.mark_done(session, row, utcnow(), "submit.skipped", reason=f"task is {task.state}")
            return "skipped"
        try:
            job_input = claims.parse_stored_input(raw_input, ctx.settings.input_limits)
        except InvalidJson as refused:
            # Stored before the input limits existed (the API refuses such input now): no retry can
            # help, only the caller can, by sending an input within the limits. So: the caller's.
            return Attempt(
                None,  # type: ignore[arg-type]  # refused: no call, so no work to carry
                RetryPolicy(),
                refused=PermanentError(f"input refused: {refused}"),
                refused_fault=Fault.CALLER,
            )
        provider = ctx.providers.get(task.provider)
        if provider is None:  # configuration changed after the task was accepted
            return Attempt(None, RetryPolicy(), refused=PermanentError(f"provider {task.provider!r} is not configured"))  # type: ignore[arg-type]
        token = None
        if ctx.settings.providers[task.provider].webhook_scheme == TOKEN_URL:
            # committed with this start transaction, before the vendor can call back with it
            token = callback_tokens.issue(session, task.id, utcnow())
        job = SubmitJob(task.reference, job_input, token)  # never the correlation id: two clients may share one
        return Attempt(
            (provider, job),
            provider_policy(ctx.settings.providers[task.provider]),
            deadline=task.execution_deadline,
            provider=task.provider,
        )

    def _settle(self, ctx: Liaison, task: ExternalTask) -> Attempt[tuple[Provider, SubmitJob]]:
        """Canceled while the vendor had not answered (``service.lifecycle.request_cancel``): ask
        ``find``, never submit. Retried per the provider's policy while the vendor cannot be asked;
        spent, it is a dead letter and the task stays ``cancel_requested`` for an operator."""
        self.settling = True
        provider = ctx.providers.get(task.provider)
        if provider is None:  # configuration changed after the task was accepted
            return Attempt(None, RetryPolicy(), refused=PermanentError(f"provider {task.provider!r} is not configured"))  # type: ignore[arg-type]
        return Attempt(
            (provider, SubmitJob(task.reference, None)),
            provider_policy(ctx.settings.providers[task.provider]),
            provider=task.provider,
        )

    def call(self, ctx: Liaison, attempt: Attempt[tuple[Provider, SubmitJob]]) -> str | None:
        """The vendor's job id (None only when settling: the vendor holds no job). A rate-limited
        call (before submit, or before find after an uncertain submit) comes back from the top: the
        vendor's Idempotency-Key makes a repeated submit harmless."""
        provider, job = attempt.work
        if self.settling:
            return self._find(provider, job)
        try:
            return provider.submit(job)
        except UncertainError as exc:
            # The vendor may have created the job: ask before trying again, so it never runs twice.
            try:
                job_id = self._find(provider, job)
            except RateLimited:
                self.unsettled = True  # the vendor may hold a job meanwhile: a cancel asks first
                raise
            except (TransientError, UncertainError) as lost:
                # Still unknown: an uncertain attempt, noted on the row (outcomes.retry_or_dead_letter)
                # so that a cancel meanwhile asks the vendor before it ends the task.
                raise UncertainError(f"{exc}; find: {lost}", retry_after_s=lost.retry_after_s) from None
            if job_id is None:
                raise TransientError(f"{exc}; the vendor has no job for this reference") from None
            return job_id

    @staticmethod
    def _find(provider: Provider, job: SubmitJob) -> str | None:
        try:
            return provider.find(job.reference)
        except PermanentError as refused:
            # find carries nothing of the caller's: refusing it breaks the vendor's contract.
            raise PermanentError(f"find: {refused}", status=refused.status, failure=Failure.BAD_RESPONSE) from None

    def succeeded(
        self,
        ctx: Liaison,
        session: Session,
        outbox_id: int,
        attempt: Attempt[tuple[Provider, SubmitJob]],
        result: str | None,
    ) -> str:
        """The row and its task claimed with the vendor job's lock, which the record needs before it
        looks for events that overtook the job id, in one statement (``claim_outbox_and_task``)."""
        assert self.task is not None  # claimed with its row at the start
        if result is None:  # settling: the vendor holds no job for the canceled task
            claimed = claims.claim_outbox_and_task(session, outbox_id)
            if claimed is None:
                return "done"
            row, task, _ = claimed
            if task.state != State.CANCEL_REQUESTED or task.vendor_job_id is not None:
                transitions.mark_done(session, row, utcnow(), "submit.skipped", reason=f"task is {task.state}")
                return "skipped"
            lifecycle.cancel_unsubmitted(session, row, task, utcnow())
            return "canceled"
        claimed = claims.claim_outbox_and_task(session, outbox_id, job=(self.task.provider, result))
        if claimed is None:
            return "done"
        row, self.task, _ = claimed
        return self.record(ctx, session, row, attempt, result, job_locked=True)

    def record(
        self,
        ctx: Liaison,
        session: Session,
        row: OutboxMessage,
        attempt: Attempt[tuple[Provider, SubmitJob]],
        result: str | None,
        *,
        job_locked: bool = False,
    ) -> str:
        assert result is not None  # settling's None is handled by succeeded
        ps = ctx.settings.providers.get(self.task.provider) if self.task is not None else None
        if self.task is not None and ps is not None and self.task.vendor_job_id is None:
            polling.arm(self.task, ps.poll_schedule_s, utcnow())  # with the answer's own UPDATE
        vendor_events.record_submission(session, row, result, utcnow(), task=self.task, job_locked=job_locked)
        metrics.submission(attempt.provider or "", "submitted")
        return "submitted"

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        provider_name, deadline = provider_of(ctx, outbox_id)
        ps = ctx.settings.providers.get(provider_name or "")
        return Attempt(None, provider_policy(ps) if ps else RetryPolicy(), deadline=deadline, provider=provider_name)
