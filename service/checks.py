"""Status checks: ask the vendor's status API about one job and apply what the vendor itself says,
nothing else. Two things ask for one: a ``confirm`` provider's unsigned hint (``service.ingress``:
the hint's body is never applied, it only names the job) and a poll (``service.polling``).

A check is a ``check`` outbox row (its worker, ``workers.tasks.check``, makes the ``status`` call on
the calls queue, through the provider's rate limit, outside any transaction); its answer goes
through ``service.reconciliation.apply_snapshot``, the webhook's own path (inbox dedup, the state
machine, the relays). A task has at most one pending check (``ux_outbox_messages_pending_check``,
and the task's row lock taken here first): a flood of hints or a poll that overtakes a slow check
asks the vendor once, not once each."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from core.states import TERMINAL
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service.incidents import IncidentKind, open_incident
from service.outbox_rows import add_outbox
from service.reconciliation import apply_snapshot
from service.transitions import finished, mark_done

#: why a check was asked for (its row's ``payload.reason``)
HINT = "hint"
POLL = "poll"


class HintResult(StrEnum):
    """What became of a ``confirm`` hint (the answer's ``status``, the metric's label)."""

    CHECKING = "checking"  # a check of the job was written
    PENDING = "pending"  # one was pending already: this hint adds nothing
    FINAL = "final"  # the task is final: nothing left to learn
    UNKNOWN_JOB = "unknown_job"  # no task of this provider has that job: nothing stored


def pending_check(session: Session, task_id: int) -> OutboxMessage | None:
    return store_of(session).lifecycle.pending_check(session, task_id)


def request_check(session: Session, task: ExternalTask, reason: str, now: datetime) -> OutboxMessage | None:
    """A check of ``task`` (locked by the caller), unless one is pending already (None then). The
    timeline says so once per check, not once per request."""
    if pending_check(session, task.id) is not None:
        return None
    event = ("check.requested", {"reason": reason})
    return add_outbox(session, OutboxKind.CHECK, task, now, reason=reason, event=event)


def hint(session: Session, provider: str, job_id: str, now: datetime) -> HintResult:
    """A ``confirm`` hint naming ``job_id``: one check of its task. An unknown job is answered and
    forgotten (no orphan is kept: a hint proves nothing, and storing what anyone may send would be
    unbounded); a hint that overtook the submit's answer is covered by the next poll or reconciliation."""
    task = store_of(session).lifecycle.task_for_hint(session, provider, job_id)
    if task is None:
        return HintResult.UNKNOWN_JOB
    if task.state in TERMINAL:
        return HintResult.FINAL
    pending = pending_check(session, task.id)
    if pending is None:
        request_check(session, task, HINT, now)
        return HintResult.CHECKING
    if pending.deliveries > 0 and (task.poll_due_at is None or task.poll_due_at > now):
        # Its call may have gone out before the vendor sent this: the poll job asks once more
        # when it is done (service.polling claims no task while its check is pending). A check
        # not started yet asks after this hint came, and answers for it. The task's lock, which
        # a check's start takes too, orders the two.
        task.poll_due_at = now
    return HintResult.PENDING


def settle_check(
    session: Session, row: OutboxMessage, task: ExternalTask, status: str, outcome: Any, now: datetime
) -> str:
    """The vendor's answer, applied through the webhook's path; the row is done. The timeline says
    so when the answer moved something; a poll that heard ``running`` again adds nothing to it."""
    assert task.vendor_job_id is not None  # a check is only written for a task with a job
    result = apply_snapshot(session, task.provider, task.vendor_job_id, status, outcome, now)
    applied = result is not None and result.status == "applied"
    store_of(session).outbox.finish(row, now)
    finished(session, row, now, "check.done", event_written=not applied, vendor_status=status)
    return "applied" if applied else "unchanged"


def skip_check(session: Session, row: OutboxMessage, why: str, now: datetime) -> str:
    mark_done(session, row, now, "check.skipped", reason=why)
    return "skipped"


def check_failed(
    session: Session, row: OutboxMessage, task: ExternalTask, error: str, unknown: bool, now: datetime
) -> str:
    """The vendor could not be asked, or said it has no such job (an Incident, as reconciliation
    opens). Never retried: the next hint or poll asks again."""
    if unknown:
        open_incident(
            session,
            IncidentKind.UNKNOWN_JOB,
            f"job:{task.provider}:{task.vendor_job_id}",
            f"{task.provider} does not know job {task.vendor_job_id}: {error}",
            now,
            correlation_id=task.correlation_id,
        )
    mark_done(session, row, now, "check.failed", error=error[:500], unknown_job=unknown)
    return "failed"
