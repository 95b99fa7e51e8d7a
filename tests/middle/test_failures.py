"""``service.dead_letters``: dead letters and their repair (replay, discard), the poison guard, and
callback endpoints parked by 410 Gone."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.classify import Fault
from core.states import EventType, State
from models.attention import Incident
from models.db import Database
from models.messages import POISON, DeadLetter, OutboxKind, OutboxMessage
from models.task import ExternalTask
from service.claims import claim_outbox
from service.dead_letters import (
    PARKED_ENDPOINT_GONE,
    NotReplayable,
    count_delivery,
    dead_letter,
    dead_letter_message,
    disable_endpoint,
    discard,
    enable_endpoint,
    endpoint_disabled,
    park,
    replay,
)
from service.incidents import IncidentKind
from service.lifecycle import request_cancel
from service.vendor_events import receive_event
from tests.middle.builders import NOW, at_vendor, later, new_client, outbox_rows, submit, timeline
from webhooks.events import VendorEvent

CALLBACK = "https://shop.example/cb?token=secret"


def _incidents(session: Session, kind: str) -> list[Incident]:
    return list(session.scalars(select(Incident).where(Incident.kind == kind).order_by(Incident.id)))


def _relay(session: Session, task_job: str = "job-1") -> tuple[ExternalTask, OutboxMessage]:
    """A task whose completion must be relayed: (task, its relay row)."""
    task = at_vendor(session, new_client(session), f"order-{task_job}", task_job)
    result = receive_event(
        session, "sim", f"wh-{task_job}", VendorEvent(EventType.COMPLETED, task_job, "succeeded"), NOW
    )
    return task, result.outbox[0]


def test_a_submission_that_fails_for_good_fails_the_task_and_tells_the_domain_app(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        row, task = pending.outbox[0], pending.task
        rows = dead_letter(session, row, "422 rejected", Fault.CALLER, later(1))
        letter = session.scalars(select(DeadLetter)).one()
        assert (letter.kind, letter.message_id, letter.fault, letter.attempts) == (
            "submit",
            row.message_id,
            "caller",
            1,
        )
        assert letter.payload["outbox_kind"] == "submit" and letter.provider == "sim"
        assert row.done_at == later(1)
        assert task.outcome is not None
        assert task.state == State.FAILED and task.outcome["dead_letter_id"] == letter.id
        assert [r.payload["type"] for r in rows] == ["task.completed"] and rows[0].payload["state"] == "failed"
        # the caller's fault opens no incident (issue 43 point 7): the dead-letter list is its place
        assert _incidents(session, IncidentKind.SUBMIT_FAILED) == []
        assert "submit.dead_lettered" in timeline(session, task)


def test_a_dead_lettered_relay_leaves_the_task_as_it_was(db: Database) -> None:
    with db.transaction() as session:
        task, relay = _relay(session)
        assert dead_letter(session, relay, "endpoint 500 x4", Fault.SYSTEM, later(1)) == []
        assert task.state == State.SUCCEEDED and task.last_error == "endpoint 500 x4"
        assert len(_incidents(session, IncidentKind.RELAY_FAILED)) == 1


def test_replay_reopens_the_failed_task_with_the_same_message_id(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        row, task = pending.outbox[0], pending.task
        dead_letter(session, row, "vendor down", Fault.SYSTEM, later(1))
        letter = session.scalars(select(DeadLetter)).one()
        message_id = row.message_id
        rows = replay(session, letter, later(2))
        assert rows == [row] and row.message_id == message_id  # the vendor sees the same Idempotency-Key
        assert row.done_at is None and row.attempts == 0 and row.created_at == later(2)
        assert task.state == State.REQUESTED and task.outcome is None
        assert (letter.state, letter.replay_count) == ("replayed", 1)
        assert _incidents(session, IncidentKind.SUBMIT_FAILED)[0].resolved_at == later(2)
        assert timeline(session, task)[-2:] == ["submit.replayed", "state.requested"]
        with pytest.raises(NotReplayable):
            replay(session, letter, later(3))


def test_discard_closes_the_letter_and_its_incident_without_redoing_anything(db: Database) -> None:
    with db.transaction() as session:
        _, relay = _relay(session)
        dead_letter(session, relay, "gone", Fault.SYSTEM, later(1))  # the system's: it opens an incident
        letter = session.scalars(select(DeadLetter)).one()
        discard(session, letter, later(2))
        assert (letter.state, letter.closed_at) == ("discarded", later(2))
        assert relay.done_at == later(1)  # not re-driven
        assert _incidents(session, IncidentKind.RELAY_FAILED)[0].resolved_at == later(2)
        with pytest.raises(NotReplayable):
            discard(session, letter, later(3))
        with pytest.raises(NotReplayable):
            replay(session, letter, later(3))


def _start(session: Session, row_id: int) -> bool | None:
    """What a task's start transaction does first: claim the row (None: gone or done), count the start."""
    row = claim_outbox(session, row_id)
    return None if row is None else count_delivery(session, row, 2, NOW)


def test_a_message_that_never_finishes_is_dead_lettered_as_poison_past_the_limit(db: Database) -> None:
    with db.transaction() as session:
        pending = submit(session, new_client(session), "order-1")
        row_id, task = pending.outbox[0].id, pending.task
    for _ in range(2):
        with db.transaction() as session:
            assert _start(session, row_id) is True
    with db.transaction() as session:
        assert _start(session, row_id) is False
        relays = [r for r in outbox_rows(session, task) if r.kind == OutboxKind.RELAY]
        assert [r.payload["type"] for r in relays] == ["task.completed"]  # the submit failed the task
        letter = session.scalars(select(DeadLetter)).one()
        assert letter.kind == POISON and letter.attempts == 0 and "2 times" in letter.error
        assert len(_incidents(session, IncidentKind.POISON_MESSAGE)) == 1
    with db.transaction() as session:
        assert _start(session, row_id) is None  # done: never runs again


def test_a_broker_message_we_cannot_decode_is_kept_and_discarding_it_resolves_its_incident(db: Database) -> None:
    with db.transaction() as session:
        letter = dead_letter_message(session, "m" * 100, {"body": "???"}, "cannot decode", NOW)
        assert letter.kind == POISON and len(letter.message_id) == 64
        discard(session, letter, later(1))
        assert _incidents(session, IncidentKind.POISON_MESSAGE)[0].resolved_at == later(1)


def test_a_410_parks_the_clients_relays_and_reenabling_releases_them(db: Database) -> None:
    with db.transaction() as session:
        task, relay = _relay(session)
        client_id = task.client_id
        disable_endpoint(session, client_id, CALLBACK, "410 Gone", NOW)
        assert endpoint_disabled(session, client_id, CALLBACK)
        assert not endpoint_disabled(session, new_client(session).id, CALLBACK)  # another tenant's is not
        park(session, relay, CALLBACK, NOW)
        assert relay.parked_reason == PARKED_ENDPOINT_GONE
        assert relay.target == "https://shop.example/cb"  # never the query (it may hold a token)
        assert timeline(session, task)[-1] == "relay.parked"
        assert len(_incidents(session, IncidentKind.ENDPOINT_DISABLED)) == 1

        released = enable_endpoint(session, client_id, "https://shop.example/cb", later(1))
        assert released == [relay] and relay.parked_reason is None
        assert not endpoint_disabled(session, client_id, CALLBACK)
        assert _incidents(session, IncidentKind.ENDPOINT_DISABLED)[0].resolved_at == later(1)
        with pytest.raises(NotReplayable):
            enable_endpoint(session, client_id, CALLBACK, later(2))


def test_enabling_one_clients_endpoint_releases_none_of_anothers(db: Database) -> None:
    with db.transaction() as session:
        task, relay = _relay(session, "job-1")
        other_task, other_relay = _relay(session, "job-2")
        for t, r in ((task, relay), (other_task, other_relay)):
            disable_endpoint(session, t.client_id, CALLBACK, "410 Gone", NOW)
            park(session, r, CALLBACK, NOW)
        assert enable_endpoint(session, task.client_id, CALLBACK, later(1)) == [relay]
        assert other_relay.parked_reason == PARKED_ENDPOINT_GONE
        assert endpoint_disabled(session, other_task.client_id, CALLBACK)


def test_a_dead_letter_of_a_relay_kind_names_the_right_incident(db: Database) -> None:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session), "order-1", "job-1")
        cancel_row = next(r for r in request_cancel(session, task, "asked", NOW) if r.kind == OutboxKind.CANCEL)
        dead_letter(session, cancel_row, "vendor refused", Fault.SYSTEM, later(1))
        assert len(_incidents(session, IncidentKind.CANCEL_FAILED)) == 1
        assert task.state == State.CANCEL_REQUESTED  # a failed cancel does not end the task
