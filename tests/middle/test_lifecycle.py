"""``service.lifecycle``: cancellation, deadlines (escalate, cancel), reconciliation's claims, and
orphans flagged, attached or discarded by an operator."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from core.classify import Fault
from core.deadlines import VendorAnswer
from core.states import EventType, State
from models.attention import Incident, OrphanEvent
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask
from service.dead_letters import NotReplayable, dead_letter
from service.incidents import IncidentKind
from service.lifecycle import (
    AlreadyFinal,
    CancelKeyReused,
    cancel_key_first_time,
    cancel_unsubmitted,
    escalate_due,
    note_unsettled,
    request_cancel,
)
from service.orphans import attach_orphan, discard_orphan, flag_stale_orphans
from service.probes import claim_silent, settle_probe
from service.reconciliation import claim_quiet, claim_unsubmitted
from service.vendor_events import receive_event, record_submission
from tests.middle.builders import NOW, at_vendor, later, new_client, outbox_rows, submit, timeline
from webhooks.events import VendorEvent


def _incidents(session: Session, kind: str) -> list[Incident]:
    return list(session.scalars(select(Incident).where(Incident.kind == kind).order_by(Incident.id)))


# --- Cancellation ---


def test_a_task_the_vendor_never_saw_is_canceled_at_once(db: Database) -> None:
    with db.transaction() as session:
        task = submit(session, new_client(session), "order-1").task
        rows = request_cancel(session, task, "no longer needed", NOW)
        assert task.state == State.CANCELED and task.outcome == {"canceled": "no longer needed"}
        assert [(r.kind, r.payload["type"]) for r in rows] == [(OutboxKind.RELAY, "task.completed")]


def test_a_task_at_the_vendor_is_canceled_there_through_the_outbox(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1")
        rows = request_cancel(session, task, "no longer needed", NOW)
        assert task.state == State.CANCEL_REQUESTED
        assert [r.kind for r in rows] == [OutboxKind.CANCEL]  # cancel_requested is not relayed
        assert request_cancel(session, task, "again", later(1)) == []  # asked already: nothing more


def _unanswered(session: Session, how: str) -> tuple[ExternalTask, OutboxMessage]:
    """A task whose submit the vendor has not answered, ``how``: a delivery under way, or an attempt
    ``find`` could not settle."""
    task = submit(session, new_client(session), "order-1").task
    [row] = outbox_rows(session, task)
    if how == "a delivery under way":
        row.deliveries = 1
    else:
        note_unsettled(row)
    return task, row


@pytest.mark.parametrize("unanswered", ["a delivery under way", "find could not settle an attempt"])
def test_a_task_whose_submit_is_unanswered_keeps_its_place_until_the_vendor_says(db: Database, unanswered: str) -> None:
    """The vendor may hold a job we have no id for: the cancel waits for the submit's outcome (no
    cancel row yet: no job id to send), counted open (``cancel_requested``); ``find`` finding no job
    ends it canceled with the caller's reason."""
    with db.transaction() as session:
        task, row = _unanswered(session, unanswered)
        rows = request_cancel(session, task, "no longer needed", NOW)
        assert task.state == State.CANCEL_REQUESTED and rows == [] and task.outcome is None
        assert row.done_at is None  # the submit settles it
        rows = cancel_unsubmitted(session, row, task, later(1))
        assert task.state == State.CANCELED and task.outcome == {"canceled": "no longer needed"}
        assert row.done_at == later(1) and "submit.canceled" in timeline(session, task)
        assert [(r.kind, r.payload["type"]) for r in rows] == [(OutboxKind.RELAY, "task.completed")]


@pytest.mark.parametrize("unanswered", ["a delivery under way", "find could not settle an attempt"])
def test_a_cancel_waiting_for_an_unanswered_submit_never_writes_its_submit_row(db: Database, unanswered: str) -> None:
    """A delivery ending locks its submit row and then the task (``record_attempt_failure``); the
    cancel holds the task's lock, so writing the row too would deadlock with it (a 503 in CI). The
    cancel only reads the row: no statement of the cancel's transaction touches ``outbox_messages``."""
    with db.transaction() as session:
        task_id = _unanswered(session, unanswered)[0].id
    written: list[str] = []

    def note_writes(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("UPDATE OUTBOX_MESSAGES", "DELETE FROM OUTBOX_MESSAGES")):
            written.append(statement)

    event.listen(db.engine, "before_cursor_execute", note_writes)
    try:
        with db.transaction() as session:
            task = session.get_one(ExternalTask, task_id)
            request_cancel(session, task, "no longer needed", NOW)
            assert task.state == State.CANCEL_REQUESTED
    finally:
        event.remove(db.engine, "before_cursor_execute", note_writes)
    assert written == []


def test_an_unanswered_submit_that_cannot_be_settled_leaves_the_task_to_an_operator(db: Database) -> None:
    """Its budget spent while ``find`` could not be asked: a dead letter and an incident, and the
    task stays ``cancel_requested`` (the vendor may hold a job), not failed: a replay asks again."""
    with db.transaction() as session:
        task = submit(session, new_client(session), "order-1").task
        [row] = outbox_rows(session, task)
        note_unsettled(row)
        request_cancel(session, task, "no longer needed", NOW)
        assert dead_letter(session, row, "find: 503", Fault.SYSTEM, later(1)) == []
        assert task.state == State.CANCEL_REQUESTED
        assert [i.kind for i in _incidents(session, IncidentKind.SUBMIT_FAILED)] == [IncidentKind.SUBMIT_FAILED]


def test_a_final_task_cannot_be_canceled(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.COMPLETED, "job-1", "succeeded"), NOW)
        with pytest.raises(AlreadyFinal):
            request_cancel(session, task, "too late", later(1))


def test_a_cancel_key_is_bound_to_the_task_it_canceled(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        one, two = submit(session, client, "one").task, submit(session, client, "two").task
        assert cancel_key_first_time(session, client.id, one, "ck-1", NOW)
        assert not cancel_key_first_time(session, client.id, one, "ck-1", later(1))  # the same request again
        with pytest.raises(CancelKeyReused):
            cancel_key_first_time(session, client.id, two, "ck-1", later(1))
        # Keys are per client: another client may use the same one.
        other = new_client(session)
        assert cancel_key_first_time(session, other.id, submit(session, other, "one").task, "ck-1", NOW)


# --- Deadlines ---


def test_an_overdue_task_at_the_vendor_is_asked_about_first_and_claimed_once(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", acceptance_deadline=later(60))
        assert escalate_due(session, later(59), 100) == (0, [])
        escalated, rows = escalate_due(session, later(90), 100)
        assert escalated == 1 and task.state == State.SUBMITTED and task.acceptance_escalated_at == later(90)
        [probe] = rows
        assert probe.kind == OutboxKind.PROBE and probe.payload["reason"] == "acceptance"
        assert timeline(session, task)[-1] == "acceptance.asking_vendor"
        assert _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []  # not before the vendor answered
        assert escalate_due(session, later(900), 100) == (0, [])  # once per deadline


def test_a_vendor_that_says_queued_gets_the_escalation_saying_so(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", acceptance_deadline=later(60))
        [probe] = escalate_due(session, later(90), 100)[1]
        assert settle_probe(session, probe, task, VendorAnswer.QUEUED, later(91), status="queued") == "escalated"
        [relay] = [r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY]
        assert relay.payload["type"] == "task.deadline_exceeded" and relay.payload["deadline"] == "acceptance"
        assert relay.payload["late_by_s"] == 31.0 and relay.payload["vendor_status"] == "queued"
        assert task.state == State.SUBMITTED and probe.done_at == later(91)
        [incident] = _incidents(session, IncidentKind.DEADLINE_EXCEEDED)
        assert incident.correlation_id == "order-1" and "the vendor: queued" in incident.detail


def test_an_acceptance_deadline_the_vendor_says_running_is_met_not_escalated(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", acceptance_deadline=later(60))
        [probe] = escalate_due(session, later(90), 100)[1]
        assert settle_probe(session, probe, task, VendorAnswer.RUNNING, later(91), status="running") == "applied"
        assert task.state == State.ACCEPTED  # its job.accepted webhook was lost; the status said so
        assert _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []


def test_a_probe_for_a_deadline_met_meanwhile_is_left_alone(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", acceptance_deadline=later(60))
        [probe] = escalate_due(session, later(90), 100)[1]
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-1"), later(91))
        assert settle_probe(session, probe, task, VendorAnswer.QUEUED, later(92), status="queued") == "skipped"
        assert probe.done_at is not None and _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []


def test_a_vendor_that_cannot_be_reached_gets_the_escalation_saying_so(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", execution_deadline=later(60))
        [probe] = escalate_due(session, later(61), 100)[1]
        settle_probe(session, probe, task, VendorAnswer.UNREACHABLE, later(62), note="503 from the vendor")
        [relay] = [r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY]
        assert relay.payload["vendor_status"] == "unreachable"
        [incident] = _incidents(session, IncidentKind.DEADLINE_EXCEEDED)
        assert "unreachable (503 from the vendor)" in incident.detail


def test_a_job_final_at_the_vendor_is_applied_instead_of_escalated(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(
            session, new_client(session), "order-1", "job-1", execution_deadline=later(60), on_deadline="cancel"
        )
        [probe] = escalate_due(session, later(61), 100)[1]
        result = settle_probe(
            session, probe, task, VendorAnswer.FINAL, later(62), status="succeeded", outcome={"ok": 1}
        )
        assert result == "applied" and task.state == State.SUCCEEDED and task.outcome == {"ok": 1}
        kinds = [(r.kind, r.payload.get("type")) for r in outbox_rows(session, task)]
        assert (OutboxKind.RELAY, "task.completed") in kinds
        assert (OutboxKind.RELAY, "task.deadline_exceeded") not in kinds and OutboxKind.CANCEL not in dict(kinds)
        assert _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []


def test_each_deadline_escalates_on_its_own(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(
            session, new_client(session), "order-1", acceptance_deadline=later(60), execution_deadline=later(120)
        )
        escalated, rows = escalate_due(session, later(200), 100)
        assert escalated == 2 and sorted(r.payload["reason"] for r in rows) == ["acceptance", "execution"]
        assert task.acceptance_escalated_at == task.execution_escalated_at == later(200)


def test_a_final_task_is_never_escalated(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", execution_deadline=later(60))
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.COMPLETED, "job-1", "failed"), NOW)
        assert escalate_due(session, later(600), 100) == (0, [])
        assert task.execution_escalated_at is None


def test_on_deadline_cancel_cancels_at_the_vendor(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", execution_deadline=later(60), on_deadline="cancel")
        [probe] = escalate_due(session, later(61), 100)[1]
        settle_probe(session, probe, task, VendorAnswer.RUNNING, later(62), status="running")
        assert [r.kind for r in outbox_rows(session, task) if r.done_at is None] == [
            OutboxKind.RELAY,
            OutboxKind.CANCEL,
        ]
        assert task.state == State.CANCEL_REQUESTED


def test_on_deadline_cancel_of_a_task_never_submitted_cancels_it_here(db: Database) -> None:
    with db.transaction() as session:
        task = submit(session, new_client(session), "order-1", acceptance_deadline=later(60), on_deadline="cancel").task
        _, rows = escalate_due(session, later(61), 100)
        assert [r.payload["type"] for r in rows] == ["task.deadline_exceeded", "task.completed"]
        assert rows[0].payload["vendor_status"] == "no_job"  # nothing at the vendor to ask about
        assert task.state == State.CANCELED


def test_the_deadline_batch_is_bounded(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        for n in range(3):
            submit(session, client, f"order-{n}", acceptance_deadline=later(n))
        assert escalate_due(session, later(60), 2)[0] == 2  # the two oldest deadlines first
        assert escalate_due(session, later(60), 2)[0] == 1


# --- Heartbeats ---


def test_the_submission_and_every_vendor_event_move_the_heartbeat_on(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", heartbeat_timeout_s=300)
        assert task.last_event_at == NOW and task.heartbeat_due_at == later(300)
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-1"), later(100))
        assert task.last_event_at == later(100) and task.heartbeat_due_at == later(400)
        # an event that changes nothing (a repeated acceptance) is still news from the vendor
        receive_event(session, "sim", "wh-2", VendorEvent(EventType.ACCEPTED, "job-1"), later(200))
        assert task.heartbeat_due_at == later(500)
        assert claim_silent(session, later(499), 100) == (0, [])


def test_a_silent_task_is_asked_about_once_and_rearmed_when_the_vendor_answers(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", heartbeat_timeout_s=300)
        quiet = at_vendor(session, new_client(session), "order-2", "job-2")  # no heartbeat kept
        claimed, [probe] = claim_silent(session, later(300), 100)
        assert claimed == 1 and probe.task_id == task.id and probe.payload["reason"] == "heartbeat"
        assert quiet.heartbeat_due_at is None and task.heartbeat_due_at is None  # disarmed while asking
        assert claim_silent(session, later(600), 100) == (0, [])
        assert settle_probe(session, probe, task, VendorAnswer.RUNNING, later(301), status="running") == "rearmed"
        assert task.heartbeat_due_at == later(601) and task.state == State.SUBMITTED
        assert _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []


def test_a_silent_task_whose_vendor_does_not_answer_is_escalated_not_canceled(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", heartbeat_timeout_s=60, on_deadline="cancel")
        [probe] = claim_silent(session, later(60), 100)[1]
        assert settle_probe(session, probe, task, VendorAnswer.UNREACHABLE, later(61)) == "escalated"
        [relay] = [r for r in outbox_rows(session, task) if r.done_at is None]
        assert relay.payload["deadline"] == "heartbeat" and relay.payload["vendor_status"] == "unreachable"
        assert task.state == State.SUBMITTED and task.heartbeat_due_at is None  # until the vendor speaks again


def test_a_heartbeat_probe_is_dropped_once_the_vendor_has_spoken_again(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1", heartbeat_timeout_s=60)
        [probe] = claim_silent(session, later(60), 100)[1]
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-1"), later(61))
        assert settle_probe(session, probe, task, VendorAnswer.UNREACHABLE, later(62)) == "skipped"
        assert task.heartbeat_due_at == later(121)  # armed by the event, not disarmed by the probe
        assert _incidents(session, IncidentKind.DEADLINE_EXCEEDED) == []


# --- Reconciliation's claims ---


def test_quiet_tasks_at_the_vendor_are_claimed_oldest_first_and_once(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        old = at_vendor(session, client, "old", "job-old", now=NOW)
        at_vendor(session, client, "new", "job-new", now=later(500))
        submit(session, client, "not-at-vendor")
        claimed = claim_quiet(session, "sim", 900, later(1000), 100)
        assert [(q.correlation_id, q.vendor_job_id) for q in claimed] == [("old", "job-old")]
        assert old.checked_at == later(1000)
        assert claim_quiet(session, "sim", 900, later(1000), 100) == []  # claimed: quiet no longer
        assert claim_quiet(session, "other-vendor", 900, later(5000), 100) == []


def test_tasks_stuck_in_requested_hand_back_their_submit_rows(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        stuck = submit(session, client, "stuck")
        submit(session, client, "fresh", now=later(500))
        at_vendor(session, client, "taken")
        rows = claim_unsubmitted(session, 300, later(600), 100)
        assert [r.id for r in rows] == [stuck.outbox[0].id]
        assert claim_unsubmitted(session, 300, later(600), 100) == []


def test_a_scheduled_retry_is_not_stuck(db: Database) -> None:
    with db.transaction() as session:
        stuck = submit(session, new_client(session), "retrying")
        stuck.outbox[0].next_attempt_at = later(2000)
        assert claim_unsubmitted(session, 300, later(600), 100) == []


# --- Orphans ---


def test_an_orphan_unbound_past_the_window_is_flagged_once(db: Database) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-x"), NOW)
        assert flag_stale_orphans(session, later(3599), 3600, 100) == 0
        assert flag_stale_orphans(session, later(3601), 3600, 100) == 1
        assert flag_stale_orphans(session, later(7200), 3600, 100) == 0
        [incident] = _incidents(session, IncidentKind.ORPHAN_UNBOUND)
        assert "job.accepted from sim for unknown job job-x" in incident.detail


def test_an_operator_attaches_an_orphan_and_its_incident_is_resolved(db: Database) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.COMPLETED, "job-x", "succeeded", {"ok": 1}), NOW)
        flag_stale_orphans(session, later(7200), 3600, 100)
        orphan = session.scalars(select(OrphanEvent)).one()
        task = submit(session, new_client(session), "order-1").task
        rows = attach_orphan(session, orphan, task, later(7300))
        assert task.vendor_job_id == "job-x" and task.state == State.SUCCEEDED and task.outcome == {"ok": 1}
        assert [r.payload["type"] for r in rows] == ["task.completed"]
        assert orphan.state == "resolved"
        assert _incidents(session, IncidentKind.ORPHAN_UNBOUND)[0].resolved_at == later(7300)
        with pytest.raises(NotReplayable):
            attach_orphan(session, orphan, task, later(7301))


def test_an_orphan_is_not_attached_to_another_vendors_task_or_another_job(db: Database) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-x"), NOW)
        orphan = session.scalars(select(OrphanEvent)).one()
        client = new_client(session)
        elsewhere = submit(session, client, "elsewhere", provider="other-vendor").task
        with pytest.raises(NotReplayable, match="other-vendor"):
            attach_orphan(session, orphan, elsewhere, later(1))
        bound = at_vendor(session, client, "bound", "job-y")
        with pytest.raises(NotReplayable, match="another vendor job"):
            attach_orphan(session, orphan, bound, later(1))
        assert orphan.state == "open"


def test_a_discarded_orphan_is_closed_for_good(db: Database) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-x"), NOW)
        flag_stale_orphans(session, later(7200), 3600, 100)
        orphan = session.scalars(select(OrphanEvent)).one()
        discard_orphan(session, orphan, later(7300))
        assert (orphan.state, orphan.resolved_at) == ("discarded", later(7300))
        assert _incidents(session, IncidentKind.ORPHAN_UNBOUND)[0].resolved_at == later(7300)
        with pytest.raises(NotReplayable):
            discard_orphan(session, orphan, later(7301))
        # A task that later learns that job id does not pick the discarded event up.
        pending = submit(session, new_client(session), "order-1")
        record_submission(session, pending.outbox[0], "job-x", later(7400))
        assert pending.task.state == State.SUBMITTED
