"""Relay slots on both databases: one slot of the client's group and one of the endpoint's, taken
in one call (one statement on PostgreSQL while both are free), given back in one, and never more
holders than slots when many relays take and give back at once (and some die holding theirs)."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from models.base import utcnow
from models.db import Database
from models.leases import Lease
from models.messages import OutboxMessage
from models.store import store_of
from models.store.slots import give_back, release
from service.claims import take_relay_slots
from service.outbox_rows import new_message_id
from tests.integration import services
from tests.integration.stack import migrate

CLIENT, ENDPOINT = "relay:client:7", "relay:endpoint:7:ab"
GROUPS = [(CLIENT, 4), (ENDPOINT, 2)]


class NoSlot(Exception):
    """What the relay raises (``ComeBackLater``) when a group is full: its start rolls back."""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    if request.param == "sqlite":
        url, name = f"sqlite:///{tmp_path_factory.mktemp('slots') / 'slots.db'}", None
    else:
        url, name = services.create_postgres_database()
    migrate(url)
    db = Database(url)
    yield db
    db.engine.dispose()
    if name is not None:
        services.drop_postgres_database(name)
    else:
        shutil.rmtree(Path(url.removeprefix("sqlite:///")).parent, ignore_errors=True)


def take_slots(
    session: Session,
    groups: list[tuple[str, int]],
    holder: str,
    now: datetime,
    ttl_s: float,
    first: list[int] | None = None,
) -> list[str] | None:
    """The store's verb, as the relay takes its slots (``models.store.slots``)."""
    return store_of(session).slots.take(session, groups, holder, now, ttl_s, first)


@pytest.fixture(autouse=True)
def empty(database: Database) -> None:
    with database.transaction() as session:
        session.query(Lease).delete()


def held(database: Database) -> Counter[str]:
    with database.transaction() as session:
        names = session.scalars(select(Lease.name)).all()
    return Counter(name.rsplit(":", 1)[0] for name in names)


def counting(database: Database) -> Counter[str]:
    """Statements by their first word, on this engine, from now on."""
    seen: Counter[str] = Counter()

    @event.listens_for(database.engine, "before_cursor_execute")
    def _count(conn: object, cursor: object, statement: str, *_args: object) -> None:
        seen[statement.split(None, 1)[0].upper()] += 1

    return seen


def test_one_slot_of_each_group_in_one_statement_while_both_are_free(database: Database) -> None:
    now = utcnow()
    seen = counting(database)
    with database.transaction() as session:
        taken = take_slots(session, GROUPS, "a", now, 60, first=[1, 0])
    assert taken == [f"{CLIENT}:1", f"{ENDPOINT}:0"]
    takes = seen["WITH"] + seen["INSERT"]
    assert takes == (1 if database.engine.dialect.name == "postgresql" else 2)
    seen.clear()
    release(database, taken, "a")
    assert held(database) == Counter()
    assert seen["DELETE"] == 1  # both given back in one statement


def _relay_row(database: Database) -> int:
    with database.transaction() as session:
        row = OutboxMessage(message_id=new_message_id(), kind="relay", payload={}, created_at=utcnow())
        session.add(row)
        session.flush()
        return row.id


def _counted_and_target(database: Database, outbox_id: int) -> tuple[int, str | None]:
    with database.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        return row.deliveries, row.target


def test_a_relays_delivery_is_counted_with_its_slots_when_both_are_free(database: Database) -> None:
    """On PostgreSQL the statement that takes both slots counts the delivery and writes the target
    (the object holds both, nothing left to flush); when either slot is held at the first try, and
    on SQLite, nothing is counted there: the relay's start counts it as before."""
    postgres = database.engine.dialect.name == "postgresql"
    now = utcnow()
    outbox_id = _relay_row(database)
    with database.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        taken, counted = take_relay_slots(session, row, GROUPS, "a", now, 60, "https://shop.test/cb", first=[1, 0])
        assert taken == [f"{CLIENT}:1", f"{ENDPOINT}:0"] and counted is postgres
        assert not session.dirty
    assert _counted_and_target(database, outbox_id) == ((1, "https://shop.test/cb") if postgres else (0, None))
    # the client's first try is held: its other slot is taken, nothing counted
    # then the endpoint's first try is held, after the client's was free: nothing counted either
    for first, expected in (([1, 1], [f"{CLIENT}:2", f"{ENDPOINT}:1"]), ([3, 0], None)):
        other = _relay_row(database)
        with database.transaction() as session:
            row = session.get(OutboxMessage, other)
            assert row is not None
            taken, counted = take_relay_slots(
                session, row, GROUPS, f"b{first}", now, 60, "https://x.test/", first=first
            )
            assert (taken, counted) == (expected, False)
        assert _counted_and_target(database, other) == (0, None)


def test_a_held_first_try_goes_round_its_group(database: Database) -> None:
    now = utcnow()
    with database.transaction() as session:
        assert take_slots(session, GROUPS, "a", now, 60, first=[1, 0]) == [f"{CLIENT}:1", f"{ENDPOINT}:0"]
        # the client's slot 1 and the endpoint's slot 0 are held: b goes on to the next of each
        assert take_slots(session, GROUPS, "b", now, 60, first=[1, 0]) == [f"{CLIENT}:2", f"{ENDPOINT}:1"]
    for holder, first in (("c", [3, 1]), ("d", [1, 0])):  # the endpoint has no slot left
        with pytest.raises(NoSlot), database.transaction() as session:
            if take_slots(session, GROUPS, holder, now, 60, first=first) is None:
                raise NoSlot  # what the relay does (ComeBackLater): the start rolls back
    assert held(database) == Counter({CLIENT: 2, ENDPOINT: 2})


def test_a_full_group_takes_nothing_and_the_rollback_frees_the_slot_taken_before(database: Database) -> None:
    now = utcnow()
    with database.transaction() as session:
        for holder in "abcd":
            assert take_slots(session, [(ENDPOINT, 2) if holder in "ab" else (CLIENT, 2)], holder, now, 60)
    with pytest.raises(NoSlot), database.transaction() as session:
        if take_slots(session, [(CLIENT, 4), (ENDPOINT, 2)], "e", now, 60) is None:
            raise NoSlot  # e had taken a client slot: it goes with the rollback
    assert held(database) == Counter({CLIENT: 2, ENDPOINT: 2})


def test_an_expired_slot_is_taken_over_and_its_late_holder_gives_back_nothing(database: Database) -> None:
    now = utcnow()
    with database.transaction() as session:
        assert take_slots(session, [(ENDPOINT, 2)], "a", now, 10) is not None
        assert take_slots(session, [(ENDPOINT, 2)], "b", now, 60) is not None
    late = now + timedelta(seconds=11)
    with database.transaction() as session:
        taken = take_slots(session, GROUPS, "c", late, 60)
    assert taken is not None and taken[1] in {f"{ENDPOINT}:0", f"{ENDPOINT}:1"}
    with database.transaction() as session:
        [a_slot] = session.scalars(select(Lease.name).where(Lease.holder == "c", Lease.name.startswith(ENDPOINT)))
    release(database, [a_slot], "a")  # a's slot is c's now: a gives back nothing
    assert held(database) == Counter({CLIENT: 1, ENDPOINT: 2})


#: each taker's takes, and a bound on its tries so that a slot that is never freed fails the test, not hangs it
TAKES, TRIES_AT_MOST = 8, 4000


@pytest.mark.parametrize("database", ["postgres"], indirect=True)  # SQLite serialises writers: no race
def test_many_relays_at_once_never_hold_more_than_the_slots_and_never_deadlock(database: Database) -> None:
    """Twelve takers, each taking and giving back 8 times; one take in eight is a relay that
    dies holding its slots (a 0.2 s lease, taken over once it runs out), so takeovers, frees and
    give-backs all meet. As in the relay, slots are taken in the start's transaction and given back
    in the record's, and a relay that found a group full comes back a little later. Counting takes
    rather than tries keeps the competition real however fast the machine: with a fixed number of
    tries, a slow one spent most of them while two dead relays held the endpoint's slots."""
    lock = threading.Lock()
    holding: Counter[str] = Counter()
    most: Counter[str] = Counter()
    errors: list[BaseException] = []
    dead: set[str] = set()
    outcomes: Counter[str] = Counter()

    def relay(n: int) -> None:
        rng = random.Random(n)
        takes = 0
        for i in range(TRIES_AT_MOST):
            if takes == TAKES:
                return
            holder, dies = f"h{n}-{i}", rng.random() < 0.125
            try:
                with database.transaction() as session:
                    taken = take_slots(session, GROUPS, holder, utcnow(), 0.2 if dies else 30)
                    if taken is None:
                        raise NoSlot
            except NoSlot:
                with lock:
                    outcomes["waited"] += 1
                time.sleep(0.005)
                continue
            takes += 1
            with lock:
                outcomes["taken"] += 1
                if dies:
                    dead.add(holder)
                    continue
                holding.update(name.rsplit(":", 1)[0] for name in taken)
                for group in (CLIENT, ENDPOINT):
                    most[group] = max(most[group], holding[group])
            with database.transaction() as session:
                with lock:
                    holding.subtract(name.rsplit(":", 1)[0] for name in taken)
                give_back(session, taken, holder)

    def guarded(n: int) -> None:
        try:
            relay(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [], errors[:3]  # a deadlock would be a DeadlockDetected here
    assert not any(thread.is_alive() for thread in threads)
    assert outcomes["taken"] == 12 * TAKES and outcomes["waited"] > 0, outcomes  # they really competed
    assert 0 < most[ENDPOINT] <= 2 and 0 < most[CLIENT] <= 4, most
    with database.transaction() as session:
        left = set(session.scalars(select(Lease.holder)))
    assert left <= dead  # every relay that lived gave its slots back
