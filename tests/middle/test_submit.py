"""``service.intake.submit_task``: idempotency, correlation ids per client, the open-task cap."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.states import State
from models.base import Base
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask
from service.claims import claim_outbox_and_task, parse_stored_input
from service.intake import IdempotencyConflict, OpenTasksCapReached, submit_task
from tests.middle.builders import NOW, new_client, outbox_rows, request, submit, timeline
from wire.bounded_json import JsonLimits, TooDeep, TooLarge


def _count(session: Session, model: type[Base]) -> int:
    count = session.scalar(select(func.count()).select_from(model))
    assert count is not None
    return count


def test_a_new_task_is_requested_with_one_submit_row_in_the_same_transaction(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        result = submit(session, client, "order-1")
        assert result.created
        assert result.task.state == State.REQUESTED and result.task.client_id == client.id
        assert result.task.reference.startswith("ref_") and result.task.created_at == NOW
        [row] = result.outbox
        assert (row.kind, row.task_id, row.correlation_id) == (OutboxKind.SUBMIT, result.task.id, "order-1")
        assert row.dispatched_at is None and row.done_at is None
        assert timeline(session, result.task) == ["requested"]


def test_a_rolled_back_submit_leaves_neither_task_nor_outbox_row(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
    with pytest.raises(RuntimeError), db.transaction() as session:
        submit(session, session.merge(client), "order-1")
        raise RuntimeError("the request failed after the submit")
    with db.transaction() as session:
        assert _count(session, ExternalTask) == 0 and _count(session, OutboxMessage) == 0


def test_the_same_idempotency_key_and_body_returns_the_first_task_and_writes_nothing(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        first = submit(session, client, None, key="k-1")
        again = submit(session, client, None, key="k-1")
        assert not again.created and again.task.id == first.task.id and again.outbox == []
        assert _count(session, OutboxMessage) == 1


def test_the_same_idempotency_key_with_another_body_is_a_conflict(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        submit(session, client, "a", key="k-1", fingerprint="fp-1")
        with pytest.raises(IdempotencyConflict):
            submit(session, client, "a", key="k-1", fingerprint="fp-2")


def test_idempotency_keys_are_per_client(db: Database) -> None:
    with db.transaction() as session:
        shop, other = new_client(session), new_client(session)
        mine = submit(session, shop, None, key="k-1", fingerprint="fp-1")
        theirs = submit(session, other, None, key="k-1", fingerprint="fp-2")  # no conflict: another client
        assert theirs.created and theirs.task.id != mine.task.id


def test_an_existing_correlation_id_returns_that_task_and_never_submits_twice(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        first = submit(session, client, "order-1")
        again = submit(session, client, "order-1", fingerprint="another body")
        assert not again.created and again.task.id == first.task.id and again.outbox == []
        assert len(outbox_rows(session, first.task)) == 1


def test_two_clients_may_use_the_same_correlation_id(db: Database) -> None:
    with db.transaction() as session:
        shop, other = new_client(session), new_client(session)
        mine, theirs = submit(session, shop, "order-1"), submit(session, other, "order-1")
        assert mine.created and theirs.created and mine.task.id != theirs.task.id
        assert mine.task.reference != theirs.task.reference  # what the vendor sees never collides


def test_a_missing_correlation_id_is_generated(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        one, two = submit(session, client), submit(session, client)
        assert one.task.correlation_id and two.task.correlation_id
        assert one.task.correlation_id != two.task.correlation_id


def test_the_open_task_cap_refuses_a_new_task_but_still_answers_a_replay(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        submit_task(session, client, request("a"), "k-a", NOW, max_open_tasks=2)
        submit_task(session, client, request("b"), None, NOW, max_open_tasks=2)
        with pytest.raises(OpenTasksCapReached) as refused:
            submit_task(session, client, request("c"), None, NOW, max_open_tasks=2)
        assert refused.value.cap == 2 and "2 open tasks" in str(refused.value)
        replay = submit_task(session, client, request("a"), "k-a", NOW, max_open_tasks=2)
        assert not replay.created
        # Another client's open tasks do not count against this one.
        assert submit_task(session, new_client(session), request("a"), None, NOW, max_open_tasks=2).created


def test_final_tasks_free_their_place_under_the_cap(db: Database) -> None:
    with db.transaction() as session:
        client = new_client(session)
        done = submit_task(session, client, request("a"), None, NOW, max_open_tasks=1).task
        with pytest.raises(OpenTasksCapReached):
            submit_task(session, client, request("b"), None, NOW, max_open_tasks=1)
        done.state = State.SUCCEEDED.value
        session.flush()
        assert submit_task(session, client, request("b"), None, NOW, max_open_tasks=1).created


def test_the_stored_input_is_read_back_within_the_limits(db: Database) -> None:
    """What the submission reads: the input as text, with its row's claim, parsed within the limits."""

    def stored_input(session: Session, outbox_id: int, limits: JsonLimits) -> object:
        claimed = claim_outbox_and_task(session, outbox_id, with_input=True)
        assert claimed is not None
        return parse_stored_input(claimed[2] or "null", limits)

    with db.transaction() as session:
        result = submit(session, new_client(session), "order-1")
        task, outbox_id = result.task, result.outbox[0].id
        assert stored_input(session, outbox_id, JsonLimits()) == {"sku": "A1"}
        # A row stored before the limits existed may be deeper than any decoder can take.
        task.input = {"a": {"b": {"c": 1}}}
        session.flush()
        with pytest.raises(TooDeep):
            stored_input(session, outbox_id, JsonLimits(max_depth=2))
        with pytest.raises(TooLarge):
            stored_input(session, outbox_id, JsonLimits(max_bytes=5))
