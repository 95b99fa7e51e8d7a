"""Leases in the slots family of the store (``models.store.slots``: ``take_lease``, ``take_slot``,
``give_back``, and ``acquire``/``release``/``lease`` in a transaction of their own), one contract on
both databases: the same tests drive each on SQLite and on the machine's PostgreSQL (a fresh
database for this module, ``tests/integration/services.py``; that half skips where PostgreSQL is
absent, fails under CI). The statements are the same on both; a relay's two first tries in one
statement (PostgreSQL's ``Slots.take``) are ``tests/middle/test_store_contract.py``'s."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from models.db import Database
from models.leases import Lease
from models.store.slots import acquire, lease, release
from tests.middle.builders import NOW
from tests.middle.builders import later as at


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _name() -> str:
    return f"job:{uuid.uuid4().hex[:10]}"


def _holders(db: Database, prefix: str) -> dict[str, str]:
    with db.transaction() as session:
        rows = session.execute(select(Lease.name, Lease.holder).where(Lease.name.startswith(prefix)))
        return {row.name: row.holder for row in rows}


def test_take_lease_writes_only_a_missing_expired_or_own_row(db: Database) -> None:
    name = _name()
    with db.transaction() as session:
        assert db.store.slots.take_lease(session, name, "a", NOW, 60)
        assert not db.store.slots.take_lease(session, name, "b", at(59), 60)  # a's, unexpired
        assert db.store.slots.take_lease(session, name, "a", at(30), 60)  # its holder renews: to 90 s
        assert not db.store.slots.take_lease(session, name, "b", at(89), 60)
        assert db.store.slots.take_lease(session, name, "b", at(90), 60)  # expired: taken over
    with db.transaction() as session:
        row = session.get(Lease, name)
        assert row is not None and (row.holder, row.expires_at) == ("b", at(150))


def test_take_slot_goes_round_from_its_first_and_takes_over_an_expired_one(db: Database) -> None:
    group = f"relay:{uuid.uuid4().hex[:10]}"
    with db.transaction() as session:
        slots = db.store.slots
        assert slots.take_slot(session, group, 3, "a", NOW, 60, first=2) == f"{group}:2"
        assert slots.take_slot(session, group, 3, "b", NOW, 60, first=2) == f"{group}:0"  # 2 is held: round
        assert slots.take_slot(session, group, 3, "c", NOW, 10, first=0) == f"{group}:1"
        assert slots.take_slot(session, group, 3, "d", NOW, 60, first=1) is None  # all held
        assert slots.take_slot(session, group, 3, "d", at(11), 60, first=0) == f"{group}:1"  # c's ran out
    assert _holders(db, group) == {f"{group}:0": "b", f"{group}:1": "d", f"{group}:2": "a"}


def test_take_slot_from_a_random_round_finds_a_free_one(db: Database) -> None:
    group = f"relay:{uuid.uuid4().hex[:10]}"
    with db.transaction() as session:
        taken = {db.store.slots.take_slot(session, group, 4, holder, NOW, 60) for holder in "abcd"}
        assert taken == {f"{group}:{n}" for n in range(4)}
        assert db.store.slots.take_slot(session, group, 4, "e", NOW, 60) is None


def test_give_back_deletes_only_the_holders_rows(db: Database) -> None:
    one, two = _name(), _name()
    with db.transaction() as session:
        assert db.store.slots.take_lease(session, one, "a", NOW, 60)
        assert db.store.slots.take_lease(session, two, "b", NOW, 60)
    with db.transaction() as session:
        db.store.slots.give_back(session, [one, two], "a")  # two is b's: it stays
        db.store.slots.give_back(session, [], "a")  # nothing to give back: no statement
    with db.transaction() as session:
        assert session.get(Lease, one) is None and session.get(Lease, two) is not None
        db.store.slots.give_back(session, two, "b")  # one name
    with db.transaction() as session:
        assert session.get(Lease, two) is None


def test_acquire_release_and_lease_each_in_a_transaction_of_its_own(db: Database) -> None:
    name = _name()
    assert acquire(db, name, "a", NOW, 60)
    assert not acquire(db, name, "b", at(1), 60)
    release(db, name, "b")  # not b's: nothing happens
    assert not acquire(db, name, "b", at(2), 60)
    release(db, [name], "a")
    with lease(db, name, at(3), 60) as held:
        assert held
        with lease(db, name, at(3), 60) as second:
            assert not second  # held by the first: its body's work is not run
        assert _holders(db, name) != {}
    assert _holders(db, name) == {}  # released on the way out
