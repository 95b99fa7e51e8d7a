"""The task lifecycle beyond the happy path: cancellation and deadlines.

Beat jobs call these inside one transaction per batch. Every claim (the store's:
``models.store.lifecycle``) repeats a partial index's predicate (``models.task``) so it touches
only rows that can be due, and claims them with ``FOR NO KEY UPDATE SKIP LOCKED`` (SQLite: the
transaction's ``BEGIN IMMEDIATE``), so two beats, or a run overlapping the next, never act on one
row twice. NO KEY: a plain ``FOR UPDATE`` would also skip every task that another transaction is
merely referencing (inserting a TaskEvent takes a key share lock on its task), leaving it out of
this run for no reason. Reconciliation's claims are in
``service.reconciliation``, orphan events' handling in ``service.orphans``.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial

from sqlalchemy.orm import Session

from core.deadlines import HEARTBEAT, RetryAtDeadline, VendorAnswer, at_deadline, at_heartbeat, retry_past_deadline
from core.states import TERMINAL, State
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.store.lifecycle import DEADLINES, DeadlineRule, due_deadlines_query
from models.task import ExternalTask
from service.claims import lock_task
from service.errors import ServiceError
from service.incidents import IncidentKind, open_incident
from service.isolation import in_savepoint
from service.outbox_rows import add_event, add_outbox, add_relay
from service.transitions import mark_done, move
from service.vendor_events import first_time


class AlreadyFinal(ServiceError):
    def __init__(self, state: str) -> None:
        super().__init__(f"the task is already {state}")
        self.state = state


# --- Cancellation ---


class CancelKeyReused(ServiceError):
    """The cancel's Idempotency-Key was already used to cancel another task (→ 409)."""


#: ``message_type`` of the inbox rows written before cancel keys named their task: such a key is
#: taken as the same request again (what it meant then) until the inbox prunes it.
LEGACY_CANCEL_TYPE = "cancel"


def cancel_key_first_time(session: Session, client_id: int, task: ExternalTask, key: str, now: datetime) -> bool:
    """Record a cancel's Idempotency-Key, bound to its task; False when it is this request again.

    The key is unique per client in the inbox (``source=cancel:<client id>``) and its row names the
    task it canceled (``message_type=cancel:<task id>``), so the binding is data: the same key on
    another task, even from a concurrent request, meets the unique index and is refused.
    """
    bound_to = f"cancel:{task.id}"
    source = f"cancel:{client_id}"
    if first_time(session, source, key, bound_to, now):
        return True
    used_for = store_of(session).lifecycle.cancel_key_use(session, source, key)
    if used_for not in (bound_to, LEGACY_CANCEL_TYPE):
        raise CancelKeyReused("this Idempotency-Key was already used to cancel another task")
    return False


#: In a submit row's payload: an attempt went out and no answer came back, and ``find`` could not
#: settle it (it failed, or was rate-limited): the vendor may hold a job we have no id for.
UNSETTLED = "unsettled"


def note_unsettled(row: OutboxMessage) -> None:
    """The submit's last attempt may have created a job that ``find`` could not confirm or rule out."""
    if not row.payload.get(UNSETTLED):
        row.payload = {**row.payload, UNSETTLED: True}


def unanswered_submit(session: Session, task: ExternalTask) -> OutboxMessage | None:
    """The task's submit row when the vendor may hold a job we have no id for: a delivery of it is
    under way (started, not finished: the call is in flight, or its worker died in it), or an
    earlier attempt went unanswered and ``find`` could not settle it (:data:`UNSETTLED`). None when
    the vendor has answered every attempt, or none was made. The caller holds the task's lock,
    which a delivery's start takes too, so a start either committed before this reads or sees the
    cancel."""
    row = store_of(session).lifecycle.open_submit(session, task.id)
    if row is None or not (row.deliveries > 0 or row.payload.get(UNSETTLED)):
        return None
    return row


def request_cancel(session: Session, task: ExternalTask, reason: str, now: datetime) -> list[OutboxMessage]:
    """Cancel at the vendor through the outbox; a task the vendor never saw is canceled at once.

    A task whose submit the vendor has not answered (:func:`unanswered_submit`) may be at the
    vendor already: it becomes ``cancel_requested`` and keeps its place in the vendor's capacity
    (``RELEASED_OPEN``) until the submit's outcome is known. Its submit row settles it: an answer
    with a job id cancels that job at the vendor (``vendor_events.record_submission``); a retry no
    longer submits but asks ``find`` (``workers.tasks.submission``), and the task is canceled here
    once the vendor says it holds no job (:func:`cancel_unsubmitted`), or its job is canceled there."""
    if task.state in TERMINAL:
        raise AlreadyFinal(task.state)
    if task.state == State.CANCEL_REQUESTED:
        return []
    if task.vendor_job_id is None:
        unanswered = unanswered_submit(session, task)
        if unanswered is not None:
            # The submit row is only read: a delivery ending locks it and then the task, so a cancel
            # (the task locked) that wrote it too would deadlock with it. The reason is the move's.
            return move(session, task, State.CANCEL_REQUESTED, now, reason=reason, submit="unanswered")
        # The vendor never saw it, or answered every attempt without a job: cancel here. A delivery
        # that starts later finds the task canceled and ends (workers.tasks.submission).
        task.outcome = {"canceled": reason}
        return move(session, task, State.CANCELED, now, reason=reason)
    rows = move(session, task, State.CANCEL_REQUESTED, now, reason=reason)
    rows.append(add_outbox(session, OutboxKind.CANCEL, task, now, reason=reason))
    return rows


def cancel_unsubmitted(session: Session, row: OutboxMessage, task: ExternalTask, now: datetime) -> list[OutboxMessage]:
    """A ``cancel_requested`` task's unanswered submit is settled: the vendor holds no job for it
    (``find`` said so). Its submit row ends and the task is canceled, freeing its vendor slot."""
    detail = store_of(session).lifecycle.cancel_request(session, task.id)
    reason = str((detail or {}).get("reason") or "canceled before the vendor answered")
    mark_done(session, row, now, "submit.canceled", reason="the vendor holds no job for it")
    task.outcome = {"canceled": reason}
    return move(session, task, State.CANCELED, now, reason=reason)


# --- Deadlines ---


# The deadlines (``DEADLINES``: each one's column, escalation mark and partial index's predicate),
# what their check reads of a task and the claim of the due ones are the store's
# (``models.store.lifecycle``); the claim's statement keeps its name here for EXPLAIN's readers
# (``bench/beat_jobs.py``, ``tests/integration/test_beat_safety.py``).
due_query = due_deadlines_query


def escalate(
    session: Session,
    task: ExternalTask,
    deadline_name: str,
    deadline: datetime,
    now: datetime,
    answer: VendorAnswer,
    *,
    note: str | None = None,
    cancel: bool = False,
) -> list[OutboxMessage]:
    """``task.deadline_exceeded`` to the domain app and an Incident, saying what the vendor answered
    (``vendor_status``: the job is ``queued`` or ``running`` there, or the vendor was
    ``unreachable``, did not know the job, or had ``no_job`` to ask about); then the cancel when
    ``cancel``. The caller marked the deadline escalated when it claimed it."""
    late_s = round((now - deadline).total_seconds(), 3)
    vendor = answer.value + (f" ({note})" if note else "")
    add_event(
        session,
        task,
        "deadline.exceeded",
        now,
        deadline=deadline_name,
        late_by_s=late_s,
        vendor_status=answer.value,
        **({"vendor_error": note} if note else {}),
    )
    open_incident(
        session,
        IncidentKind.DEADLINE_EXCEEDED,
        f"{deadline_name}:task:{task.id}",
        f"{deadline_name} deadline {deadline.isoformat()} passed {late_s:.0f}s ago in state {task.state}; "
        f"the vendor: {vendor}",
        now,
        correlation_id=task.correlation_id,
    )
    # ``outcome`` is not read here: a task short of its final state has none yet (outcomes come
    # with completion; a failed submit's or a cancel's with their final state), so it is null.
    rows = [
        add_relay(
            session,
            task,
            "task.deadline_exceeded",
            now,
            outcome=None,
            deadline=deadline_name,
            deadline_at=deadline.isoformat(),
            late_by_s=late_s,
            vendor_status=answer.value,
        )
    ]
    if cancel:
        rows += request_cancel(session, task, f"{deadline_name} deadline exceeded", now)
    return rows


def ask_vendor(
    session: Session, task: ExternalTask, reason: str, deadline: datetime, now: datetime
) -> list[OutboxMessage]:
    """Before escalating ``reason`` (a deadline's name, or ``heartbeat``), ask the vendor: a
    ``probe`` outbox row, whose worker calls the provider's ``status`` outside any transaction and
    then applies a final answer or escalates (``service.probes``). Through the outbox, a crash
    after this commit loses nothing: the sweep publishes the probe again. A task the vendor never
    accepted has no job to ask about: a deadline escalates at once and says so."""
    if task.vendor_job_id is None:
        no_job = VendorAnswer.NO_JOB
        step = at_heartbeat(no_job) if reason == HEARTBEAT else at_deadline(no_job, task.on_deadline)
        return escalate(session, task, reason, deadline, now, VendorAnswer.NO_JOB, cancel=step.cancel)
    add_event(session, task, f"{reason}.asking_vendor", now, deadline_at=deadline.isoformat())
    return [add_outbox(session, OutboxKind.PROBE, task, now, reason=reason, deadline_at=deadline.isoformat())]


def _claim_deadline(session: Session, task: ExternalTask, rule: DeadlineRule, now: datetime) -> list[OutboxMessage]:
    setattr(task, rule.escalated, now)  # off the partial index: claimed, once
    return ask_vendor(session, task, rule.name, getattr(task, rule.column.key), now)


def escalate_due(session: Session, now: datetime, batch: int) -> tuple[int, list[OutboxMessage]]:
    """Each overdue task, once per deadline: the vendor is asked first (:func:`ask_vendor`), and the
    escalation (``task.deadline_exceeded`` and an Incident; the task keeps running unless
    ``on_deadline=cancel``) follows unless the job turns out to be final.

    Each task is claimed in a savepoint: one that fails is rolled back alone, gets a
    ``batch_row_failed`` incident and is marked escalated all the same (so the next run does not
    trip over it again, ahead of every other tenant's deadlines); the rest of the batch goes on.
    """
    escalated, rows = 0, []
    for rule in DEADLINES:
        due = store_of(session).lifecycle.due_deadlines(session, rule, now, batch)
        for task in due:
            task_id, correlation_id = task.id, task.correlation_id
            ok, out = in_savepoint(
                session, "check_deadlines", correlation_id, now, partial(_claim_deadline, session, task, rule, now)
            )
            if ok:
                rows += out or []
                escalated += 1
            else:
                store_of(session).lifecycle.mark_escalated(session, task_id, rule, now)
    return escalated, rows


def retry_past_deadline_of(session: Session, row: OutboxMessage, now: datetime) -> RetryAtDeadline:
    """A submit retry the budget allows would start after the task's execution deadline
    (docs/design.md §6). Under ``on_deadline=escalate`` the deadline is escalated once (the vendor
    has no job yet, so the escalation says ``no_job``) and the retry goes ahead: the task fails
    only when its retry budget is spent. Under ``cancel`` the task is canceled, and the caller ends
    the row instead of retrying. Runs in the caller's transaction, which locks the task."""
    assert row.task_id is not None  # a submission's row always names its task
    task = lock_task(session, row.task_id)
    decision = retry_past_deadline(task.on_deadline, escalated=task.execution_escalated_at is not None)
    deadline = task.execution_deadline
    assert deadline is not None  # a retry only passes a deadline the task has
    if decision is not RetryAtDeadline.RETRY and task.execution_escalated_at is None:
        task.execution_escalated_at = now
        ask_vendor(session, task, "execution", deadline, now)  # with a cancel, under on_deadline=cancel
    if decision is RetryAtDeadline.CANCEL and task.state not in TERMINAL:
        request_cancel(session, task, "execution deadline exceeded", now)
    if decision is RetryAtDeadline.CANCEL and task.state == State.CANCEL_REQUESTED:
        # The vendor may hold a job from an unanswered attempt: the row goes on, its retry asking
        # ``find`` rather than submitting (request_cancel), so no job is left behind untracked.
        return RetryAtDeadline.RETRY
    return decision


# --- Reconciliation ---
