"""What fair dispatch selects, on both databases (issue 44): the statements that pick a client's next
tasks differ in what each database allows (``NOT IN`` over grouped keys, ``FOR UPDATE OF … SKIP
LOCKED``, pages after a rank), so the rules are proven on each, through the service layer, on a
migrated database of its own (no stack: nothing here needs a worker or a broker).

- a capped vendor is never left idle while a tenant's slots would go to a backlog its key holds back;
- a client's key-free (or other-key) task passes any run of tasks held by their keys, however long;
- a replayed dead letter's submission waits its turn like a new one: replays never take a vendor past
  its ``MAX_IN_FLIGHT`` nor a key past its limit.

Each test has a provider of its own: a capacity counts every open task of its provider."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from core.classify import Fault
from core.fair_share import DispatchPolicy
from models.client import Client
from models.db import Database
from models.messages import DeadLetter, OutboxMessage
from models.read_models.lists import DeadLetterFilter
from models.task import RELEASED_OPEN, ExternalTask
from service import dispatch
from service.dead_letters import dead_letter
from service.operator_actions import replay_matching, replay_one
from service.vendor_events import receive_event, record_submission
from tests.integration import services
from tests.integration.stack import migrate
from tests.middle.builders import later, new_client, submit
from webhooks.events import EventType, VendorEvent

CAP = 8
POLICY = DispatchPolicy(
    window=16, aging_s=60, caps={"cap-keys": CAP, "cap-replay-one": CAP, "cap-replay-many": CAP, "cap-paging": 100}
)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    if request.param == "sqlite":
        url, name = f"sqlite:///{tmp_path_factory.mktemp('selection') / 'selection.db'}", None
    else:
        url, name = services.create_postgres_database()
    migrate(url)
    db = Database(url)
    dispatch.install(db.sessionmaker, POLICY)
    yield db
    db.engine.dispose()
    if name is not None:
        services.drop_postgres_database(name)
    else:
        shutil.rmtree(Path(url.removeprefix("sqlite:///")).parent, ignore_errors=True)


def _client(db: Database, **limits: int) -> Client:
    with db.transaction() as session:
        client = new_client(session)
        client.submit_rate_per_s, client.submit_burst, client.max_open_tasks = 1000.0, 1000, 100000
        for name, value in limits.items():
            setattr(client, name, value)
        return client


def _submit(db: Database, client: Client, ids: list[str], provider: str, at: float, **fields: Any) -> None:
    with db.transaction() as session:
        for n, cid in enumerate(ids):
            submit(session, client, cid, now=later(at + n / 1000), provider=provider, **fields)


def _task(session: Session, correlation_id: str) -> ExternalTask:
    return session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == correlation_id)).one()


def _submit_row(session: Session, task: ExternalTask) -> OutboxMessage:
    return session.scalars(
        select(OutboxMessage).where(OutboxMessage.task_id == task.id, OutboxMessage.kind == "submit")
    ).one()


def _reach_vendor(db: Database, ids: list[str], at: float) -> None:
    """The vendor took these (one transaction): each frees a place in its client's window."""
    with db.transaction() as session:
        for cid in ids:
            record_submission(session, _submit_row(session, _task(session, cid)), f"job-{cid}", later(at))


def _finish(db: Database, correlation_id: str, at: float) -> None:
    """The vendor took it and finished it: it frees a place of the vendor's capacity, and its key."""
    _reach_vendor(db, [correlation_id], at)
    with db.transaction() as session:
        provider = _task(session, correlation_id).provider
        event = VendorEvent(EventType.COMPLETED, f"job-{correlation_id}", "succeeded", {"ok": 1})
        receive_event(session, provider, f"done-{correlation_id}", event, later(at))
        assert _task(session, correlation_id).state == "succeeded"


def _open_at_vendor(db: Database, provider: str) -> int:
    with db.transaction() as session:
        found = session.scalar(
            select(func.count()).select_from(ExternalTask).where(ExternalTask.provider == provider, text(RELEASED_OPEN))
        )
        return int(found or 0)


def _released(db: Database, ids: list[str]) -> set[str]:
    with db.transaction() as session:
        rows = session.execute(
            select(ExternalTask.correlation_id).where(
                ExternalTask.correlation_id.in_(ids), ExternalTask.dispatched_at.is_not(None)
            )
        )
        return set(rows.scalars().all())


def _waiting(db: Database, correlation_id: str) -> tuple[datetime | None, str | None, str | None]:
    """(dispatched_at, wait_reason, its submit row's parked_reason)."""
    with db.transaction() as session:
        task = _task(session, correlation_id)
        return task.dispatched_at, task.wait_reason, _submit_row(session, task).parked_reason


# --- a capped vendor is not left idle by a backlog that only its own key holds back ------------


def test_a_tenant_held_back_by_its_key_leaves_no_slot_of_a_capped_vendor_idle(database: Database) -> None:
    """Cap 8. X has one ``acct``-keyed job open and 199 queued on that key; Y has 40 tasks. When
    three of Y's jobs finish, X (the fewest open jobs) would get the three free places, and can use
    none: they go to Y, and the vendor stays full."""
    db, provider = database, "cap-keys"
    x, y = _client(db), _client(db)
    _submit(db, x, ["x-acct-0"], provider, 0, concurrency_key="acct")
    y_ids = [f"y-{i}" for i in range(40)]
    _submit(db, y, y_ids[:7], provider, 1)
    assert _open_at_vendor(db, provider) == CAP
    x_queued = [f"x-acct-{i}" for i in range(1, 200)]
    _submit(db, x, x_queued, provider, 2, concurrency_key="acct")
    _submit(db, y, y_ids[7:], provider, 3)
    assert _waiting(db, "y-7")[1] == "vendor_capacity"

    for n in range(3):
        _finish(db, f"y-{n}", 10 + n)
    assert _open_at_vendor(db, provider) == CAP  # 5 of 8 before: X took the places and used none
    assert _released(db, y_ids[7:]) == {"y-7", "y-8", "y-9"}
    assert _released(db, x_queued) == set()  # its key holds them: one open already
    with db.transaction() as session:  # beat's release finds nothing more to do: the vendor is full
        assert dispatch.release(session, provider, None, later(20)) == 0

    _finish(db, "x-acct-0", 30)  # X's key frees: X, with the fewest open jobs, has the place
    assert _released(db, x_queued) == {"x-acct-1"}
    assert _open_at_vendor(db, provider) == CAP


# --- a client's other tasks pass any run of tasks held by their keys ---------------------------


def test_a_key_free_task_passes_a_run_of_tasks_held_by_their_key_longer_than_any_page(database: Database) -> None:
    """120 queued tasks behind one ``acct`` job still open (more than ``4 × wanted + 16``, the window
    a selection used to read), then a key-free task and one of another key: both go."""
    db, provider = database, "sim-held-run"
    shop = _client(db)
    _submit(db, shop, ["acct-0"], provider, 0, concurrency_key="acct")
    run = [f"acct-{i}" for i in range(1, 121)]
    _submit(db, shop, run, provider, 1, concurrency_key="acct")
    _submit(db, shop, ["free"], provider, 2)
    _submit(db, shop, ["other"], provider, 3, concurrency_key="other")
    assert _released(db, ["acct-0", "free", "other", *run]) == {"acct-0", "free", "other"}
    assert _waiting(db, "acct-1")[1] == "concurrency_key"


def test_a_key_filled_by_the_selection_itself_is_passed_over_on_the_next_page(database: Database) -> None:
    """The client's window is full while 100 tasks of one key queue, none of it open yet; then 16
    places free at once. The first of the key goes, and the other 99 (more than the page the
    selection reads) are passed over for the key-free task behind them."""
    db, provider = database, "cap-paging"
    shop = _client(db)
    window = [f"w-{i}" for i in range(16)]
    _submit(db, shop, window, provider, 0)
    bulk = [f"bulk-{i}" for i in range(100)]
    _submit(db, shop, bulk, provider, 1, concurrency_key="bulk")
    _submit(db, shop, ["p-free"], provider, 2)
    assert _released(db, [*bulk, "p-free"]) == set()  # the window is full: they wait their turn
    _reach_vendor(db, window, 3)  # 16 places free in one transaction: one release of 16 wanted
    assert _released(db, [*bulk, "p-free"]) == {"bulk-0", "p-free"}


# --- a replayed dead letter waits in fair dispatch like a new submission -----------------------


def _full_vendor_with_three_dead_letters(db: Database, provider: str) -> tuple[Client, list[int], list[str]]:
    """A client's 11 tasks at a vendor capped at 8: the first 3 fail for good (their submissions
    dead-lettered), which lets the 3 that waited go: the vendor is full again. Returns the client,
    the three letters and their tasks."""
    shop = _client(db)
    ids = [f"{provider}-{i}" for i in range(11)]
    _submit(db, shop, ids, provider, 0)
    assert _open_at_vendor(db, provider) == CAP
    with db.transaction() as session:
        for cid in ids[:3]:
            dead_letter(session, _submit_row(session, _task(session, cid)), "vendor said no", Fault.SYSTEM, later(5))
    assert _open_at_vendor(db, provider) == CAP  # the three that waited went in their place
    with db.transaction() as session:
        letters = session.scalars(
            select(DeadLetter.id).where(DeadLetter.provider == provider).order_by(DeadLetter.id)
        ).all()
    return shop, list(letters), ids[:3]


def test_replaying_dead_letters_one_by_one_keeps_a_capped_vendor_at_its_capacity(database: Database) -> None:
    db, provider = database, "cap-replay-one"
    _, letters, replayed = _full_vendor_with_three_dead_letters(db, provider)
    for n, letter_id in enumerate(letters):
        replay_one(db, letter_id, later(10 + n))
    assert _open_at_vendor(db, provider) == CAP  # 11 before: each replay went straight to the broker
    for cid in replayed:
        dispatched_at, reason, parked = _waiting(db, cid)
        assert (dispatched_at, reason, parked) == (None, "vendor_capacity", "queued")
    _finish(db, f"{provider}-3", 20)  # a place frees: the first replayed goes, and only it
    assert _released(db, replayed) == {replayed[0]}
    assert _waiting(db, replayed[0])[2] is None  # its row un-parked, to be published
    assert _open_at_vendor(db, provider) == CAP


def test_replaying_every_matching_dead_letter_keeps_a_capped_vendor_at_its_capacity(database: Database) -> None:
    db, provider = database, "cap-replay-many"
    _, letters, replayed = _full_vendor_with_three_dead_letters(db, provider)
    assert replay_matching(db, DeadLetterFilter(provider=provider), later(10), batch=2) == (3, 0)
    assert _open_at_vendor(db, provider) == CAP
    assert _released(db, replayed) == set()
    with db.transaction() as session:
        assert {session.get(DeadLetter, letter_id).state for letter_id in letters} == {"replayed"}  # type: ignore[union-attr]


def test_a_replayed_submission_waits_for_its_concurrency_key(database: Database) -> None:
    """A keyed task fails for good, which lets the next of its key go; replayed, it waits for it."""
    db, provider = database, "sim-replay-key"
    shop = _client(db)
    _submit(db, shop, ["k-1", "k-2"], provider, 0, concurrency_key="acct")
    with db.transaction() as session:
        dead_letter(session, _submit_row(session, _task(session, "k-1")), "vendor said no", Fault.SYSTEM, later(5))
        letter_id = session.scalars(select(DeadLetter.id).where(DeadLetter.provider == provider)).one()
    assert _released(db, ["k-2"]) == {"k-2"}
    replay_one(db, letter_id, later(10))
    assert _waiting(db, "k-1") == (None, "concurrency_key", "queued")
    _finish(db, "k-2", 20)
    assert _released(db, ["k-1"]) == {"k-1"}


def test_a_replay_with_room_goes_at_once(database: Database) -> None:
    db, provider = database, "sim-replay-room"
    shop = _client(db)
    _submit(db, shop, ["r-1"], provider, 0)
    with db.transaction() as session:
        dead_letter(session, _submit_row(session, _task(session, "r-1")), "vendor said no", Fault.SYSTEM, later(5))
        letter_id = session.scalars(select(DeadLetter.id).where(DeadLetter.provider == provider)).one()
    replay_one(db, letter_id, later(10))
    dispatched_at, reason, parked = _waiting(db, "r-1")
    assert dispatched_at is not None and reason is None and parked is None
