"""Leases (``models.leases``, taken and given back by ``models.store.slots``): named leases and the slot
semaphore built from them."""

from __future__ import annotations

from models.db import Database
from models.store.slots import acquire, lease, release
from tests.middle.builders import NOW, later


def test_a_lease_is_held_by_one_holder_until_released_or_expired(db: Database) -> None:
    assert acquire(db, "reconcile:sim", "a", NOW, 60)
    assert not acquire(db, "reconcile:sim", "b", later(59), 60)
    assert acquire(db, "reconcile:sim", "a", later(30), 60)  # the holder renews
    assert not acquire(db, "reconcile:sim", "b", later(89), 60)
    assert acquire(db, "reconcile:sim", "b", later(90), 60)  # expired: a dead holder blocks no one
    release(db, "reconcile:sim", "a")  # not a's any more: nothing happens
    assert not acquire(db, "reconcile:sim", "a", later(91), 60)
    release(db, "reconcile:sim", "b")
    assert acquire(db, "reconcile:sim", "a", later(91), 60)


def test_leases_of_different_names_are_independent(db: Database) -> None:
    assert acquire(db, "reconcile:sim", "a", NOW, 60)
    assert acquire(db, "reconcile:other", "b", NOW, 60)


def test_slots_count_holders(db: Database) -> None:
    def take(holder: str, now=NOW) -> str | None:
        with db.transaction() as session:
            return db.store.slots.take_slot(session, "relay:shop", 2, holder, now, 60)  # from a random slot round

    taken = [take(holder) for holder in ("a", "b", "c")]
    assert sorted(name or "" for name in taken[:2]) == ["relay:shop:0", "relay:shop:1"] and taken[2] is None
    release(db, taken[0] or "", "a")
    assert take("c", later(1)) == taken[0]


def test_a_taker_goes_round_from_its_first_slot_and_takes_over_an_expired_one(db: Database) -> None:
    with db.transaction() as session:
        assert db.store.slots.take_slot(session, "relay:shop", 3, "a", NOW, 60, first=2) == "relay:shop:2"
        assert db.store.slots.take_slot(session, "relay:shop", 3, "b", NOW, 60, first=2) == "relay:shop:0"  # 2 is held
        assert db.store.slots.take_slot(session, "relay:shop", 3, "c", NOW, 10, first=0) == "relay:shop:1"
        assert db.store.slots.take_slot(session, "relay:shop", 3, "d", NOW, 60, first=1) is None  # all held
    with db.transaction() as session:  # c's lease ran out (its holder died): the only one to take
        assert db.store.slots.take_slot(session, "relay:shop", 3, "d", later(11), 60, first=0) == "relay:shop:1"


def test_the_context_manager_releases_what_it_took(db: Database) -> None:
    with lease(db, "job", NOW, 60) as held:
        assert held
        with lease(db, "job", NOW, 60) as second:
            assert not second
    with lease(db, "job", NOW, 60) as again:
        assert again


def test_one_holders_slots_of_several_groups_go_back_in_one_call(db: Database) -> None:
    """A relay holds a slot of its client and one of its endpoint; both go back together."""
    with db.transaction() as session:
        taken = [
            db.store.slots.take_slot(session, group, 1, "a", NOW, 60)
            for group in ("relay:client:1", "relay:endpoint:1:ab")
        ]
    assert taken == ["relay:client:1:0", "relay:endpoint:1:ab:0"]
    release(db, [name for name in taken if name], "a")
    with db.transaction() as session:
        assert db.store.slots.take_slot(session, "relay:client:1", 1, "b", NOW, 60) == "relay:client:1:0"
        assert db.store.slots.take_slot(session, "relay:endpoint:1:ab", 1, "b", NOW, 60) == "relay:endpoint:1:ab:0"
