"""``service.operator_actions``: operator actions shared by the admin API and the CLI. Each commits; the
publish hook then hands the rows the commit re-armed to the (stub) publisher, which is what the
tests read (after forgetting what their set-up published)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.classify import Fault
from core.states import EventType, State
from models.attention import Incident, OrphanEvent
from models.db import Database
from models.messages import DeadLetter, OutboxMessage
from models.read_models.lists import DeadLetterFilter
from models.task import ExternalTask
from service.dead_letters import NotReplayable, dead_letter, disable_endpoint, park
from service.operator_actions import (
    Ambiguous,
    NotFoundError,
    attach_orphan_to,
    discard_one,
    discard_orphan_one,
    enable_callback_endpoint,
    replay_matching,
    replay_one,
    task_for_operator,
    update_incident,
)
from service.vendor_events import receive_event
from tests.middle.builders import NOW, at_vendor, later, new_client, submit
from webhooks.events import VendorEvent

if TYPE_CHECKING:
    from tests.middle.conftest import Published

CALLBACK = "https://shop.example/cb"


def _dead_submits(db: Database, n: int, fault: str = Fault.SYSTEM) -> list[tuple[int, int]]:
    """n failed submissions: (dead letter id, outbox id) each."""
    out = []
    with db.transaction() as session:
        client = new_client(session)
        for i in range(n):
            row = submit(session, client, f"order-{i}").outbox[0]
            dead_letter(session, row, "vendor down", fault, NOW)
            out.append((session.scalars(select(DeadLetter.id).where(DeadLetter.outbox_id == row.id)).one(), row.id))
    return out


def test_replay_one_commits_then_publishes_the_row_again(db: Database, published: Published) -> None:
    [(letter_id, outbox_id)] = _dead_submits(db, 1)
    published.forget()
    letter = replay_one(db, letter_id, later(1))
    assert letter.state == "replayed"
    assert published.sent == [("liaison.submit", outbox_id)]
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        assert row.dispatched_at is not None  # stamped after the commit
        assert session.scalars(select(ExternalTask.state)).one() == State.REQUESTED
    with pytest.raises(NotReplayable):
        replay_one(db, letter_id, later(2))
    with pytest.raises(NotFoundError):
        replay_one(db, 10_000, later(2))
    assert len(published.sent) == 1


def test_replay_matching_replays_in_batches_what_the_filter_matches(db: Database, published: Published) -> None:
    system = _dead_submits(db, 3)
    caller = _dead_submits(db, 1, Fault.CALLER)
    published.forget()
    progress: list[tuple[int, int]] = []
    replayed, skipped = replay_matching(
        db, DeadLetterFilter(fault=Fault.SYSTEM), later(1), progress=lambda r, s: progress.append((r, s)), batch=2
    )
    assert (replayed, skipped) == (3, 0) and progress == [(2, 0), (3, 0)]
    assert published.ids == [outbox_id for _, outbox_id in system]
    assert replay_matching(db, DeadLetterFilter(), later(2), limit=0) == (0, 0)
    assert replay_matching(db, DeadLetterFilter(), later(2)) == (1, 0)
    assert published.ids[-1] == caller[0][1]


def test_discard_one_closes_without_publishing(db: Database, published: Published) -> None:
    [(letter_id, _)] = _dead_submits(db, 1)
    published.forget()
    assert discard_one(db, letter_id, later(1)).state == "discarded"
    assert published.sent == []


def test_update_incident_sets_its_owner_and_resolves_it(db: Database, published: Published) -> None:
    _dead_submits(db, 1)
    with db.transaction() as session:
        incident_id = session.scalars(select(Incident.id)).one()
    update_incident(db, incident_id, later(1), owner="ops")
    incident = update_incident(db, incident_id, later(2), resolve=True, note="vendor back")
    assert incident.owner == "ops" and incident.resolved_at == later(2) and "vendor back" in incident.detail
    with pytest.raises(NotFoundError):
        update_incident(db, 10_000, later(3), resolve=True)


def test_a_correlation_id_two_clients_use_needs_the_client(db: Database) -> None:
    with db.transaction() as session:
        shop, other = new_client(session, "shop"), new_client(session, "other")
        mine, theirs = submit(session, shop, "order-1").task, submit(session, other, "order-1").task
        with pytest.raises(Ambiguous, match="other, shop"):
            task_for_operator(session, "order-1", None)
        assert task_for_operator(session, "order-1", "shop").id == mine.id
        assert task_for_operator(session, "order-1", "other", lock=True).id == theirs.id
        with pytest.raises(NotFoundError):
            task_for_operator(session, "order-2", None)
        with pytest.raises(NotFoundError):
            task_for_operator(session, "order-1", "nobody")


def _parked_relay(db: Database, client_name: str, job_id: str) -> int:
    with db.transaction() as session:
        task = at_vendor(session, new_client(session, client_name, CALLBACK), f"{client_name}-1", job_id)
        relay = receive_event(session, "sim", f"wh-{job_id}", VendorEvent(EventType.ACCEPTED, job_id), NOW).outbox[0]
        disable_endpoint(session, task.client_id, CALLBACK, "410 Gone", NOW)
        park(session, relay, CALLBACK, NOW)
        return relay.id


def test_enabling_an_endpoint_publishes_its_parked_relays(db: Database, published: Published) -> None:
    relay_id = _parked_relay(db, "shop", "job-1")
    published.forget()
    assert enable_callback_endpoint(db, CALLBACK, later(1)) == 1
    assert published.sent == [("liaison.relay", relay_id)]
    with pytest.raises(NotReplayable):
        enable_callback_endpoint(db, CALLBACK, later(2))


def test_an_endpoint_two_clients_disabled_needs_the_client(db: Database, published: Published) -> None:
    _parked_relay(db, "shop", "job-1")
    theirs = _parked_relay(db, "other", "job-2")
    published.forget()
    with pytest.raises(Ambiguous):
        enable_callback_endpoint(db, CALLBACK, later(1))
    assert enable_callback_endpoint(db, CALLBACK, later(1), client_name="other") == 1
    assert published.ids == [theirs]


def test_an_orphan_attached_by_an_operator_publishes_its_relay(db: Database, published: Published) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.COMPLETED, "job-x", "succeeded"), NOW)
        orphan_id = session.scalars(select(OrphanEvent.id)).one()
        submit(session, new_client(session, "shop"), "order-1")
    published.forget()
    orphan = attach_orphan_to(db, orphan_id, "order-1", later(1))
    assert orphan.state == "resolved"
    [(task_name, relay_id)] = published.sent
    with db.transaction() as session:
        relay = session.get(OutboxMessage, relay_id)
        assert relay is not None
        assert task_name == "liaison.relay" and relay.payload["type"] == "task.completed"
    with pytest.raises(NotFoundError):
        discard_orphan_one(db, 10_000, later(2))


def test_an_orphan_discarded_by_an_operator_publishes_nothing(db: Database, published: Published) -> None:
    with db.transaction() as session:
        receive_event(session, "sim", "wh-1", VendorEvent(EventType.ACCEPTED, "job-x"), NOW)
        orphan_id = session.scalars(select(OrphanEvent.id)).one()
    published.forget()
    assert discard_orphan_one(db, orphan_id, later(1)).state == "discarded"
    assert published.sent == []
