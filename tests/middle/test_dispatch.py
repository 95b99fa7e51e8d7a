"""Fair dispatch (``service.dispatch``) in the layer that writes: a backlog waits in the database and
is released as room frees, in priority order within a client, round-robin across clients for a
vendor's capacity, one task per concurrency key. What is published is what the stub broker got."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.classify import Fault
from core.fair_share import DispatchPolicy
from models.client import Client
from models.db import Database
from models.messages import DeadLetter, OutboxMessage
from models.read_models.lists import DeadLetterFilter
from models.store import store_of
from models.task import ExternalTask
from service import dispatch
from service.dead_letters import dead_letter
from service.lifecycle import request_cancel
from service.operator_actions import replay_matching, replay_one
from service.vendor_events import receive_event, record_submission
from tests.middle.builders import NOW, later, new_client, submit, timeline
from tests.middle.conftest import Published
from webhooks.events import EventType, VendorEvent

WINDOW = 2


@pytest.fixture
def policy(db: Database, published: Published) -> Iterator[DispatchPolicy]:
    chosen = DispatchPolicy(window=WINDOW, aging_s=60, caps={"capped": 3})
    dispatch.install(db.sessionmaker, chosen)
    yield chosen
    db.sessionmaker.kw["info"].pop(dispatch.POLICY, None)


def _published_tasks(db: Database, published: Published) -> list[str]:
    """Correlation ids of the tasks whose submit rows reached the broker, in order."""
    with db.transaction() as session:
        by_row = dict(
            session.execute(
                select(OutboxMessage.id, ExternalTask.correlation_id).join(
                    ExternalTask, ExternalTask.id == OutboxMessage.task_id
                )
            )
            .tuples()
            .all()
        )
    return [by_row[outbox_id] for name, outbox_id in published.sent if name == "liaison.submit"]


def _task(session: Session, correlation_id: str) -> ExternalTask:
    return session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == correlation_id)).one()


def _reach_vendor(db: Database, correlation_id: str, seconds: float = 1) -> None:
    with db.transaction() as session:
        task = _task(session, correlation_id)
        row = session.scalars(
            select(OutboxMessage).where(OutboxMessage.task_id == task.id, OutboxMessage.kind == "submit")
        ).one()
        record_submission(session, row, f"job-{correlation_id}", later(seconds))


def _finish(db: Database, correlation_id: str, seconds: float = 2) -> None:
    with db.transaction() as session:
        provider = _task(session, correlation_id).provider
        event = VendorEvent(EventType.COMPLETED, f"job-{correlation_id}", "succeeded", {"ok": 1})
        receive_event(session, provider, f"done-{correlation_id}", event, later(seconds))
        assert _task(session, correlation_id).state == "succeeded"


def _client(db: Database, **limits: int) -> Client:
    with db.transaction() as session:
        client = new_client(session)
        for name, value in limits.items():
            setattr(client, name, value)
        return client


def test_a_backlog_waits_in_the_database_and_goes_as_its_window_frees(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    shop = _client(db)
    with db.transaction() as session:
        for i in range(5):
            submit(session, shop, f"b-{i}", now=later(i / 10))
    assert _published_tasks(db, published) == ["b-0", "b-1"]  # the window; the rest wait
    with db.transaction() as session:
        waiting = _task(session, "b-2")
        assert (waiting.dispatched_at, waiting.wait_reason) == (None, "client_backlog")
        assert timeline(session, waiting) == ["requested", "submit.queued"]
    _reach_vendor(db, "b-0")  # a place in the window frees: the next goes, in the same transaction
    assert _published_tasks(db, published) == ["b-0", "b-1", "b-2"]
    with db.transaction() as session:
        released = _task(session, "b-2")
        assert released.dispatched_at is not None and released.wait_reason is None
        assert timeline(session, released)[-1] == "submit.released"


def test_a_look_noted_with_the_claim_is_the_releases_first_look_in_its_transaction_only(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    """A submission's record claims its row with "is anything queued behind it?" on PostgreSQL
    (``service.dispatch.queued_behind``): the release its move makes takes that answer instead of
    asking again, in that transaction, and only there."""
    shop = _client(db)
    with db.transaction() as session:
        for i in range(3):
            submit(session, shop, f"n-{i}", now=later(i / 10))
    assert _published_tasks(db, published) == ["n-0", "n-1"]
    with db.transaction() as session:
        task = _task(session, "n-0")
        row = session.scalars(select(OutboxMessage).where(OutboxMessage.task_id == task.id)).one()
        dispatch.note_queued(session, task, True, False)  # as if read before n-2 was queued
        record_submission(session, row, "job-n-0", later(1))
        assert _task(session, "n-2").dispatched_at is None  # the noted answer stood: no second look
        dispatch.note_queued(session, task, True, False)
    with db.transaction() as session:  # another transaction looks for itself
        assert dispatch.release(session, "sim", shop.id, later(2)) == 1
    assert _published_tasks(db, published) == ["n-0", "n-1", "n-2"]


def test_a_priority_1_task_overtakes_the_clients_queued_priority_3_work(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    shop = _client(db)
    with db.transaction() as session:
        for i in range(6):
            submit(session, shop, f"p3-{i}", now=later(i / 10))
        submit(session, shop, "urgent", now=later(1), priority=1)
    _reach_vendor(db, "p3-0")
    _reach_vendor(db, "p3-1")
    assert _published_tasks(db, published) == ["p3-0", "p3-1", "urgent", "p3-2"]


def test_a_vendors_capacity_is_shared_round_robin_across_clients(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    a, b, c = (_client(db, weight=1) for _ in range(3))
    with db.transaction() as session:
        a.weight = b.weight = c.weight = 4  # windows wide enough: only the vendor's cap of 3 holds them
        session.add_all([a, b, c])
    with db.transaction() as session:
        for client, name in ((a, "a"), (b, "b"), (c, "c")):
            for i in range(4):
                submit(session, client, f"{name}{i}", now=later(len(name) + i / 10), provider="capped")
    assert _published_tasks(db, published) == ["a0", "a1", "a2"]  # the cap: 3 open at the vendor
    with db.transaction() as session:
        assert _task(session, "b0").wait_reason == "vendor_capacity"
    finished: list[str] = []
    for step in range(9):  # each finished job frees one place, and it goes to the next client in turn
        oldest_open = next(t for t in _published_tasks(db, published) if t not in finished)
        _reach_vendor(db, oldest_open, seconds=10 + step)
        _finish(db, oldest_open, seconds=10 + step)
        finished.append(oldest_open)
    assert _published_tasks(db, published)[3:] == ["b0", "c0", "a3", "b1", "c1", "b2", "c2", "b3", "c3"]


def test_one_task_per_concurrency_key_and_the_others_of_the_client_pass(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    shop = _client(db, weight=5)
    with db.transaction() as session:
        submit(session, shop, "acct-1", now=later(0.1), concurrency_key="account-7")
        submit(session, shop, "acct-2", now=later(0.2), concurrency_key="account-7")
        submit(session, shop, "free", now=later(0.3))
        submit(session, shop, "acct-3", now=later(0.4), concurrency_key="account-7")
    assert _published_tasks(db, published) == ["acct-1", "free"]
    with db.transaction() as session:
        assert _task(session, "acct-2").wait_reason == "concurrency_key"
    _reach_vendor(db, "acct-1")
    assert _published_tasks(db, published) == ["acct-1", "free"]  # still open at the vendor
    _finish(db, "acct-1")
    assert _published_tasks(db, published) == ["acct-1", "free", "acct-2"]


def test_a_canceled_queued_task_ends_its_row_and_frees_nothing_it_never_held(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    shop = _client(db)
    with db.transaction() as session:
        for i in range(3):
            submit(session, shop, f"c-{i}", now=later(i / 10))
    with db.transaction() as session:
        request_cancel(session, _task(session, "c-2"), "no longer needed", later(1))
    # its row is published once, to end itself (the submit finds the task canceled); c-0, c-1 still hold the window
    assert _published_tasks(db, published) == ["c-0", "c-1", "c-2"]
    with db.transaction() as session:
        assert _task(session, "c-2").state == "canceled"


def test_what_a_missed_release_leaves_is_released_by_the_beat_job(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    shop = _client(db)
    with db.transaction() as session:
        for i in range(3):
            submit(session, shop, f"m-{i}", now=later(i / 10))
        # as if b-0 had reached the vendor in a transaction that released nothing (a race)
        _task(session, "m-0").state = "submitted"
    with db.transaction() as session:
        assert dispatch.queued_pairs(session) == [("sim", shop.id)]
        assert dispatch.release(session, "sim", shop.id, later(5)) == 1
    assert _published_tasks(db, published) == ["m-0", "m-1", "m-2"]


def test_without_a_policy_every_task_goes_at_once(db: Database, published: Published) -> None:
    shop = _client(db)
    with db.transaction() as session:
        for i in range(5):
            submit(session, shop, f"n-{i}", now=NOW)
    assert _published_tasks(db, published) == [f"n-{i}" for i in range(5)]


def test_a_released_task_waiting_for_the_vendors_rate_limit_says_so(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    from app.api.representation import waiting_body
    from service.transitions import note_rate_limited

    shop = _client(db)
    with db.transaction() as session:
        task = submit(session, shop, "paced", now=NOW).task
        assert waiting_body(task) is None  # released at once: nothing to wait for
        note_rate_limited(session, task.id, later(1))
        note_rate_limited(session, task.id, later(2))  # still the same wait: one event
    with db.transaction() as session:
        waiting = waiting_body(_task(session, "paced"))
        assert waiting is not None and waiting["reason"] == "rate_limit"
        assert timeline(session, _task(session, "paced")).count("submit.rate_limited") == 1
    _reach_vendor(db, "paced")
    with db.transaction() as session:
        assert waiting_body(_task(session, "paced")) is None


# --- issue 44 ---------------------------------------------------------------------------------


def test_a_place_a_client_cannot_use_goes_to_the_next_client_not_to_nobody(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    """Cap 3. X has one ``acct`` job open and its queue all on that key; Y waits. When Y's job
    finishes, X has as few open jobs as Y and waited longer, so the plan gives it the place: it can
    use none, and the place goes to Y (before issue 44 it went to nobody)."""
    x, y = _client(db), _client(db)
    with db.transaction() as session:
        submit(session, x, "x-acct-0", now=later(0.1), provider="capped", concurrency_key="acct")
        submit(session, y, "y-0", now=later(0.2), provider="capped")
        submit(session, y, "y-1", now=later(0.3), provider="capped")
        for i in range(1, 31):
            submit(session, x, f"x-acct-{i}", now=later(0.4 + i / 100), provider="capped", concurrency_key="acct")
        for i in range(2, 6):
            submit(session, y, f"y-{i}", now=later(1 + i / 10), provider="capped")
    assert _published_tasks(db, published) == ["x-acct-0", "y-0", "y-1"]
    _reach_vendor(db, "y-0")
    _finish(db, "y-0")
    assert _published_tasks(db, published) == ["x-acct-0", "y-0", "y-1", "y-2"]
    with db.transaction() as session:
        assert store_of(session).dispatch.open_at_vendor(session, "capped") == 3


def test_a_key_free_task_is_not_stuck_behind_a_long_run_of_one_blocked_key(
    db: Database, published: Published, policy: DispatchPolicy
) -> None:
    """The selection used to read ``4 × wanted + 16`` of the client's queue: 40 tasks held by their
    key in front of a key-free one kept it waiting while its window had room."""
    shop = _client(db)
    with db.transaction() as session:
        for i in range(41):
            submit(session, shop, f"acct-{i}", now=later(i / 100), concurrency_key="acct")
        submit(session, shop, "free", now=later(1))
    assert _published_tasks(db, published) == ["acct-0", "free"]


def _dead_letters_at_a_full_vendor(db: Database) -> list[int]:
    """Cap 3: the first 3 of a client's 6 tasks fail for good, so the 3 that waited go."""
    shop = _client(db, weight=4)
    with db.transaction() as session:
        for i in range(6):
            submit(session, shop, f"d-{i}", now=later(i / 10), provider="capped")
    with db.transaction() as session:
        for i in range(3):
            task = _task(session, f"d-{i}")
            row = session.scalars(select(OutboxMessage).where(OutboxMessage.task_id == task.id)).one()
            dead_letter(session, row, "vendor said no", Fault.SYSTEM, later(2))
        assert store_of(session).dispatch.open_at_vendor(session, "capped") == 3
        return list(session.scalars(select(DeadLetter.id).order_by(DeadLetter.id)))


@pytest.mark.parametrize("how", ["one by one", "matching"])
def test_replayed_dead_letters_wait_for_a_full_vendors_capacity(
    db: Database, published: Published, policy: DispatchPolicy, how: str
) -> None:
    letters = _dead_letters_at_a_full_vendor(db)
    published.forget()
    if how == "one by one":
        for letter_id in letters:
            replay_one(db, letter_id, later(5))
    else:
        assert replay_matching(db, DeadLetterFilter(), later(5)) == (3, 0)
    assert published.sent == []  # none went to the broker: the vendor is full
    with db.transaction() as session:
        assert store_of(session).dispatch.open_at_vendor(session, "capped") == 3
        replayed = _task(session, "d-0")
        assert (replayed.state, replayed.wait_reason) == ("requested", "vendor_capacity")
        assert timeline(session, replayed)[-3:] == ["submit.replayed", "state.requested", "submit.queued"]
    _reach_vendor(db, "d-3", seconds=6)
    _finish(db, "d-3", seconds=7)  # a place frees: the first replayed takes it
    assert _published_tasks(db, published) == ["d-0"]
