"""A task's callbacks in order: numbering (``service.outbox_rows.add_relay``), holding and releasing
(``service.ordering``), superseded completions, and progress coalescing (``service.progress``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.openapi import document
from core.states import EventType, State
from models.db import Database
from models.messages import DeadLetter, OutboxKind, OutboxMessage
from models.task import ExternalTask
from service.dead_letters import dead_letter, replay
from service.ordering import AWAITING_EARLIER, hold
from service.transitions import mark_done
from service.vendor_events import receive_event, record_submission
from tests.middle.builders import at_vendor, later, new_client, outbox_rows, submit, timeline
from tests.middle.conftest import Published
from webhooks.events import Progress, VendorEvent

ACCEPTED = VendorEvent(EventType.ACCEPTED, "job-1")
SUCCEEDED = VendorEvent(EventType.COMPLETED, "job-1", "succeeded", {"result": 42})


def progress(percent: float) -> VendorEvent:
    return VendorEvent(EventType.PROGRESS, "job-1", progress=Progress(percent, f"{percent:g}%"))


def relays(session: Session, task: ExternalTask) -> list[OutboxMessage]:
    return [r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY]


def test_each_callback_takes_the_next_number_and_carries_the_state_then(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", ACCEPTED, later(1))
        receive_event(session, "sim", "wh-2", progress(50), later(2))
        receive_event(session, "sim", "wh-3", SUCCEEDED, later(3))
        rows = relays(session, task)
        assert [(r.sequence, r.payload["sequence"], r.payload["type"], r.payload["state"]) for r in rows] == [
            (1, 1, "task.accepted", "accepted"),
            (2, 2, "task.progress", "accepted"),
            (3, 3, "task.completed", "succeeded"),
        ]
        assert task.relay_seq == 3 and task.completion_message_id == rows[2].message_id
        assert all(r.payload["supersedes"] is None for r in rows)
        for row in rows:  # every body has what the OpenAPI document says a callback has
            assert set(document()["components"]["schemas"]["Callback"]["required"]) - {"message_id"} <= set(row.payload)
        assert (rows[1].payload["percent"], rows[1].payload["message"]) == (50.0, "50%")


def test_progress_is_coalesced_into_the_latest_relay_while_it_is_unsent(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", ACCEPTED, later(1))
        first = receive_event(session, "sim", "wh-2", progress(10), later(2))
        assert first.status == "applied" and len(first.outbox) == 1
        merged = receive_event(session, "sim", "wh-3", progress(20), later(3))
        assert merged.status == "applied" and merged.outbox == []  # latest wins, no new callback
        [row] = first.outbox
        assert row.payload["percent"] == 20.0 and row.payload["occurred_at"] == later(3).isoformat()

        row.deliveries = 1  # a worker started it: its body may be on its way, so it is not touched
        started = receive_event(session, "sim", "wh-4", progress(30), later(4))
        assert [r.payload["percent"] for r in started.outbox] == [30.0] and row.payload["percent"] == 20.0
        assert [r.sequence for r in relays(session, task)] == [1, 2, 3]

        receive_event(session, "sim", "wh-5", SUCCEEDED, later(5))
        late = receive_event(session, "sim", "wh-6", progress(99), later(6))
        assert late.status == "ignored" and late.outbox == []  # never after the completion
        assert [r.payload["type"] for r in relays(session, task)][-1] == "task.completed"
        kinds = timeline(session, task)
        assert kinds.count("event.progress") == 3 and kinds[-1] == "event.ignored"


def test_progress_after_another_callback_is_not_merged_into_an_earlier_one(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", progress(10), later(1))  # still submitted: relayed, no move
        assert task.state == State.SUBMITTED
        receive_event(session, "sim", "wh-2", ACCEPTED, later(2))
        after = receive_event(session, "sim", "wh-3", progress(20), later(3))
        assert len(after.outbox) == 1  # a new callback after task.accepted, not a change to the one before it
        assert [(r.payload["type"], r.payload.get("percent")) for r in relays(session, task)] == [
            ("task.progress", 10.0),
            ("task.accepted", None),
            ("task.progress", 20.0),
        ]


def _two_relays(db: Database) -> tuple[int, int, int]:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        receive_event(session, "sim", "wh-1", ACCEPTED, later(1))
        receive_event(session, "sim", "wh-2", SUCCEEDED, later(2))
        first, second = relays(session, task)
        return task.id, first.id, second.id


def test_a_held_relay_is_released_when_the_earlier_one_is_delivered(db: Database, published: Published) -> None:
    task_id, first_id, second_id = _two_relays(db)
    with db.transaction() as session:
        second = session.get(OutboxMessage, second_id)
        assert second is not None
        assert hold(session, second, first_id, later(3), recheck_s=600)
    with db.transaction() as session:
        second, first = session.get(OutboxMessage, second_id), session.get(OutboxMessage, first_id)
        assert second is not None and first is not None
        assert (second.parked_reason, second.dispatched_at, second.next_attempt_at) == (
            AWAITING_EARLIER,
            None,
            later(603),
        )
        assert first.holds_back
    published.forget()
    with db.transaction() as session:
        first = session.get(OutboxMessage, first_id)
        assert first is not None
        mark_done(session, first, later(4), "relay.delivered")
    assert published.ids == [second_id]  # re-published in the transaction that settled the first
    with db.transaction() as session:
        second, first = session.get(OutboxMessage, second_id), session.get(OutboxMessage, first_id)
        task = session.get(ExternalTask, task_id)
        assert second is not None and first is not None and task is not None
        assert (second.parked_reason, second.next_attempt_at) == (None, None)
        assert not first.holds_back
        assert "relay.gap" not in timeline(session, task)


def test_a_dead_lettered_relay_releases_the_later_one_and_records_the_gap(db: Database, published: Published) -> None:
    task_id, first_id, second_id = _two_relays(db)
    with db.transaction() as session:
        second = session.get(OutboxMessage, second_id)
        assert second is not None
        assert hold(session, second, first_id, later(3), recheck_s=600)
    published.forget()
    with db.transaction() as session:
        first = session.get(OutboxMessage, first_id)
        assert first is not None
        dead_letter(session, first, "HTTP 500", "caller", later(4))
    assert published.ids == [second_id]
    with db.transaction() as session:
        task = session.get(ExternalTask, task_id)
        assert task is not None
        gaps = [e.detail for e in task.events if e.kind == "relay.gap"]
        assert [(g["sequence"], g["type"], g["reason"]) for g in gaps] == [(1, "task.accepted", "dead_lettered")]


def test_a_relay_is_not_held_by_one_already_settled(db: Database) -> None:
    _, first_id, second_id = _two_relays(db)
    with db.transaction() as session:
        first = session.get(OutboxMessage, first_id)
        assert first is not None
        mark_done(session, first, later(3), "relay.delivered")
    with db.transaction() as session:
        second = session.get(OutboxMessage, second_id)
        assert second is not None
        assert not hold(session, second, first_id, later(4), recheck_s=600)  # look again instead
        first = session.get(OutboxMessage, first_id)
        assert first is not None
        assert second.parked_reason is None and not first.holds_back


def test_the_sweep_rechecks_a_held_relay_when_its_recheck_time_is_due(db: Database, published: Published) -> None:
    _, first_id, second_id = _two_relays(db)
    with db.transaction() as session:
        second = session.get(OutboxMessage, second_id)
        assert second is not None
        assert hold(session, second, first_id, later(3), recheck_s=600)
    published.forget()
    published.publisher.sweep(later(500), grace_s=60, lease_s=3600)
    assert second_id not in published.ids
    published.publisher.sweep(later(604), grace_s=60, lease_s=3600)
    assert second_id in published.ids


def test_a_replayed_completion_supersedes_the_failed_one(db: Database) -> None:
    with db.transaction() as session:
        result = submit(session, new_client(session), "order-1")
        task, submit_row = result.task, result.outbox[0]
        [failed] = dead_letter(session, submit_row, "vendor down", "system", later(1))
        assert (failed.sequence, failed.payload["state"], failed.payload["supersedes"]) == (1, "failed", None)
        letter = session.scalars(select(DeadLetter).where(DeadLetter.outbox_id == submit_row.id)).one()
        replay(session, letter, later(2))
        assert task.state == State.REQUESTED
        record_submission(session, submit_row, "job-1", later(3))
        receive_event(session, "sim", "wh-1", SUCCEEDED, later(4))
        final = relays(session, task)[-1]
        assert (final.sequence, final.payload["state"], final.payload["supersedes"]) == (
            2,
            "succeeded",
            failed.message_id,
        )
