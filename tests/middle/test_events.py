"""Vendor news: ``receive_event`` (applied / ignored / duplicate / orphan), the submit's answer
(``record_submission``) binding orphans late, and reconciliation's ``apply_snapshot``."""

from __future__ import annotations

from sqlalchemy import select

from core.states import EventType, State
from models.attention import OrphanEvent
from models.db import Database
from models.messages import OutboxKind, ProcessedMessage
from service.reconciliation import apply_snapshot
from service.retention import prune_processed_messages
from service.transitions import mark_done, record_attempt_failure
from service.vendor_events import receive_event, record_submission
from tests.middle.builders import NOW, at_vendor, later, new_client, outbox_rows, submit, timeline
from webhooks.events import VendorEvent

ACCEPTED = VendorEvent(EventType.ACCEPTED, "job-1")
SUCCEEDED = VendorEvent(EventType.COMPLETED, "job-1", "succeeded", {"result": 42})


def test_an_event_that_moves_the_task_forward_is_applied_and_relayed(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        result = receive_event(session, "sim", "wh-1", ACCEPTED, later(1))
        assert result.status == "applied" and task.state == State.ACCEPTED
        [relay] = result.outbox
        assert relay.kind == OutboxKind.RELAY
        assert relay.payload["type"] == "task.accepted" and relay.payload["state"] == "accepted"
        assert relay.payload["outcome"] is None

        done = receive_event(session, "sim", "wh-2", SUCCEEDED, later(2))
        assert done.status == "applied" and task.state == State.SUCCEEDED and task.outcome == {"result": 42}
        assert done.outbox[0].payload["type"] == "task.completed" and done.outbox[0].payload["outcome"] == {
            "result": 42
        }
        assert timeline(session, task)[-2:] == ["state.accepted", "state.succeeded"]


def test_a_stale_event_is_recorded_on_the_timeline_and_changes_nothing(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        [completion] = receive_event(session, "sim", "wh-2", SUCCEEDED, later(1)).outbox
        late = receive_event(session, "sim", "wh-1", ACCEPTED, later(2))  # overtaken by the completion
        assert late.status == "ignored" and late.outbox == []
        assert task.state == State.SUCCEEDED and timeline(session, task)[-1] == "event.ignored"
        # the task has one callback, task.completed, first in its order: no acceptance is missing from
        # it, nothing holds it (tests/integration/test_endpoint_rejections.py meets this on a busy SQLite)
        assert [r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY] == [completion]
        assert completion.payload["type"] == "task.completed"
        assert completion.sequence == completion.payload["sequence"] == 1


def test_the_same_message_twice_is_a_duplicate_and_applies_once(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        assert receive_event(session, "sim", "wh-1", ACCEPTED, later(1)).status == "applied"
    with db.transaction() as session:
        again = receive_event(session, "sim", "wh-1", SUCCEEDED, later(2))  # same id, whatever it says
        assert again.status == "duplicate" and again.outbox == []
        reread = session.get(type(task), task.id)
        assert reread is not None
        assert reread.state == State.ACCEPTED
        assert len([r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY]) == 1


def test_message_ids_are_deduplicated_per_source(db: Database) -> None:
    with db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", ACCEPTED, later(1))
        other = receive_event(session, "other-vendor", "wh-1", ACCEPTED, later(1))
        assert other.status == "orphan"  # not a duplicate: another vendor's message, and not its job
        assert len(session.scalars(select(ProcessedMessage)).all()) == 2


def test_an_event_for_an_unknown_job_is_kept_as_an_orphan(db: Database) -> None:
    with db.transaction() as session:
        result = receive_event(session, "sim", "wh-1", SUCCEEDED, NOW)
        assert result.status == "orphan" and result.outbox == []
        orphan = session.scalars(select(OrphanEvent)).one()
        assert (orphan.source, orphan.vendor_job_id, orphan.state) == ("sim", "job-1", "open")
        assert orphan.payload["outcome"] == {"result": 42}


def test_orphans_are_bound_when_the_submit_answers_and_applied_in_arrival_order(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        # Both webhooks overtook the submit's answer; the completion even arrived first.
        receive_event(session, "sim", "wh-2", SUCCEEDED, later(1))
        receive_event(session, "sim", "wh-1", ACCEPTED, later(2))
        rows = record_submission(session, pending.outbox[0], "job-1", later(3))
        task = pending.task
        assert task.vendor_job_id == "job-1" and task.state == State.SUCCEEDED and task.outcome == {"result": 42}
        assert [r.payload["type"] for r in rows] == ["task.completed"]  # the acceptance came too late to matter
        assert set(session.scalars(select(OrphanEvent.state))) == {"resolved"}
        assert timeline(session, task) == ["requested", "state.submitted", "state.succeeded", "event.ignored"]


def test_orphans_of_another_vendor_with_the_same_job_id_stay_orphans(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        receive_event(session, "other-vendor", "wh-1", ACCEPTED, NOW)
        record_submission(session, pending.outbox[0], "job-1", later(1))
        assert pending.task.state == State.SUBMITTED
        assert session.scalars(select(OrphanEvent.state)).one() == "open"


def test_record_submission_moves_to_submitted_and_closes_the_submit_row(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        row = pending.outbox[0]
        rows = record_submission(session, row, "job-1", later(1))
        assert rows == []  # submitted is not relayed to the domain app
        assert row.done_at == later(1)
        assert pending.task.state == State.SUBMITTED and pending.task.attempts == 1


def test_a_submit_answer_for_a_task_canceled_meanwhile_cancels_the_new_job(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        pending.task.state = State.CANCELED.value
        rows = record_submission(session, pending.outbox[0], "job-1", later(1))
        assert [r.kind for r in rows] == [OutboxKind.CANCEL]
        assert pending.task.state == State.CANCELED and timeline(session, pending.task)[-1] == "submission.late"


def test_a_failed_attempt_shows_on_the_task_until_the_row_is_done(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        row, task = pending.outbox[0], pending.task
        record_attempt_failure(session, row, "503 from vendor", later(30), later(1))
        assert (row.attempts, row.next_attempt_at) == (1, later(30))
        assert (task.attempts, task.last_error, task.next_attempt_at) == (1, "503 from vendor", later(30))
        assert timeline(session, task)[-1] == "submit.attempt_failed"
        mark_done(session, row, later(31), "submit.done")
        assert row.done_at == later(31) and row.attempts == 2
        assert task.next_attempt_at is None and task.last_error is None


def test_a_snapshot_is_applied_through_the_webhooks_path_once(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        assert apply_snapshot(session, "sim", "job-1", "queued", None, later(1)) is None
        running = apply_snapshot(session, "sim", "job-1", "running", None, later(2))
        assert running is not None and running.status == "applied" and task.state == State.ACCEPTED
        again = apply_snapshot(session, "sim", "job-1", "running", None, later(3))
        assert again is not None and again.status == "duplicate"
        done = apply_snapshot(session, "sim", "job-1", "failed", {"error": "boom"}, later(4))
        assert done is not None and done.status == "applied"
        assert task.state == State.FAILED and task.outcome == {"error": "boom"}
        assert done.outbox[0].payload["type"] == "task.completed"


def test_a_snapshot_of_a_job_nobody_knows_is_an_orphan_with_a_bounded_message_id(db: Database) -> None:
    with db.transaction() as session:
        long_job = "j" * 200
        result = apply_snapshot(session, "sim", long_job, "succeeded", {}, NOW)
        assert result is not None and result.status == "orphan"
        orphan = session.scalars(select(OrphanEvent)).one()
        assert len(orphan.message_id) <= 200 and orphan.message_id.startswith("reconcile:")


def test_the_inbox_forgets_message_ids_past_its_retention(db: Database) -> None:
    with db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-old", ACCEPTED, NOW)
        receive_event(session, "sim", "wh-new", SUCCEEDED, later(3000))
    assert prune_processed_messages(db, later(3601), 3600, batch=1) == 1
    with db.transaction() as session:
        assert set(session.scalars(select(ProcessedMessage.message_id))) == {"wh-new"}
        # Past the retention an old id is news again; a task past that state simply ignores it.
        assert receive_event(session, "sim", "wh-old", ACCEPTED, later(3602)).status == "ignored"
        assert receive_event(session, "sim", "wh-new", SUCCEEDED, later(3602)).status == "duplicate"
