"""The endpoint health family of the store (``models.store.endpoint_health``), one contract on both
databases: the same tests drive each verb on SQLite and on the machine's PostgreSQL (a fresh
database for this module, ``tests/integration/services.py``; that half skips where PostgreSQL is
absent, fails under CI). One class serves both stores: the statements are the same."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from core.endpoint_health import HealthPolicy
from models.db import Database
from models.endpoint_health import MAX_ERROR_CHARS, EndpointHealth, origin_hash
from models.store import POSTGRESQL, SQLITE
from models.store.endpoint_health import EndpointHealthRows
from tests.middle.builders import add_client
from tests.middle.builders import later as at

POLICY = HealthPolicy(failures_to_pause=3, pause_s=10, pause_cap_s=40, probe_s=20)
ORIGIN = "https://shop.example"


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _client(db: Database) -> int:
    with db.transaction() as session:
        return add_client(session, callback_url=f"{ORIGIN}/cb").id


def _fail(
    db: Database, client_id: int, seconds: float, origin: str = ORIGIN, error: str = "503", delivery: int | None = None
) -> tuple[EndpointHealth, bool]:
    with db.transaction() as session:
        return db.store.endpoint_health.record_failure(session, client_id, origin, error, at(seconds), POLICY, delivery)


def _paused(db: Database, client_id: int) -> EndpointHealth:
    """The client's row for ``ORIGIN``, paused at 13 s by failures at 1, 2, 3 s (deliveries 11, 12, 13)."""
    for s in (1, 2, 3):
        row, _ = _fail(db, client_id, s, delivery=10 + s)
    assert (row.failures, row.pauses, row.paused_until, row.paused_by) == (3, 1, at(13), 13)
    return row


def _read(db: Database, row_id: int) -> EndpointHealth:
    with db.transaction() as session:
        row = session.get(EndpointHealth, row_id)
        assert row is not None
        session.expunge(row)
        return row


def test_one_class_serves_both_stores(db: Database) -> None:
    assert isinstance(db.store.endpoint_health, EndpointHealthRows)
    assert POSTGRESQL.endpoint_health.__class__ is SQLITE.endpoint_health.__class__


def test_record_failure_makes_the_row_once_and_counts_until_the_pause(db: Database) -> None:
    shop = _client(db)
    first, paused = _fail(db, shop, 1, error="x" * (MAX_ERROR_CHARS + 50))
    assert (first.failures, first.pauses, first.paused_until, paused) == (1, 0, None, False)
    assert (first.origin, first.origin_hash, first.last_failure_at) == (ORIGIN, origin_hash(ORIGIN), at(1))
    assert first.last_error == "x" * MAX_ERROR_CHARS  # the error is cut to what is kept
    assert [_fail(db, shop, s)[1] for s in (2, 3, 4)] == [False, True, False]  # the third pauses, once
    with db.transaction() as session:
        rows = session.scalar(select(func.count()).select_from(EndpointHealth).where(EndpointHealth.client_id == shop))
    assert rows == 1  # one row per client and origin, whatever the count


def test_record_failure_counts_per_client_and_origin(db: Database) -> None:
    shop, other = _client(db), _client(db)
    _paused(db, shop)
    row, _ = _fail(db, other, 4)  # the same origin, another client: its own row
    elsewhere, _ = _fail(db, shop, 5, origin="https://elsewhere.example")  # another origin of the client
    assert (row.failures, row.paused_until, elsewhere.failures, elsewhere.paused_until) == (1, None, 1, None)


def test_find_reads_the_clients_row_for_the_origin_afresh(db: Database) -> None:
    shop, other = _client(db), _client(db)
    with db.transaction() as session:
        assert db.store.endpoint_health.find(session, shop, ORIGIN) is None  # never found down: no row
    row = _paused(db, shop)
    with db.transaction() as session:
        loaded = db.store.endpoint_health.find(session, shop, ORIGIN)
        assert loaded is not None and (loaded.id, loaded.failures) == (row.id, 3)
        db.store.endpoint_health.record_success(session, row.id, at(20))  # a Core UPDATE: the object is stale
        again = db.store.endpoint_health.find(session, shop, ORIGIN)
        assert again is loaded and (again.failures, again.paused_until) == (0, None)  # read afresh, not the map's
        assert db.store.endpoint_health.find(session, shop, "https://elsewhere.example") is None
        assert db.store.endpoint_health.find(session, other, ORIGIN) is None  # another client's: none


def test_claim_probe_once_the_pause_ran_out_one_at_a_time(db: Database) -> None:
    row = _paused(db, _client(db))
    with db.transaction() as session:
        assert not db.store.endpoint_health.claim_probe(session, row.id, at(12), at(32))  # still paused
        assert db.store.endpoint_health.claim_probe(session, row.id, at(13), at(33))  # the pause ran out
        assert not db.store.endpoint_health.claim_probe(session, row.id, at(14), at(34))  # the probe is taken
    assert _read(db, row.id).probe_until == at(33)
    with db.transaction() as session:  # a probe that outlived its time is taken over
        assert db.store.endpoint_health.claim_probe(session, row.id, at(33), at(53))
    assert _read(db, row.id).probe_until == at(53)


def test_a_row_never_paused_has_no_probe_to_claim(db: Database) -> None:
    row, _ = _fail(db, _client(db), 1)
    with db.transaction() as session:
        assert not db.store.endpoint_health.claim_probe(session, row.id, at(100), at(120))  # no pause: NULL
    assert _read(db, row.id).probe_until is None


def test_hand_on_probe_frees_only_the_probe_it_names(db: Database) -> None:
    row = _paused(db, _client(db))
    with db.transaction() as session:
        assert db.store.endpoint_health.claim_probe(session, row.id, at(14), at(34))
        db.store.endpoint_health.hand_on_probe(session, row.id, at(99))  # not this probe's: nothing changes
    assert _read(db, row.id).probe_until == at(34)
    with db.transaction() as session:
        db.store.endpoint_health.hand_on_probe(session, row.id, at(34))
    freed = _read(db, row.id)
    assert (freed.pauses, freed.paused_until, freed.probe_until, freed.paused_by) == (1, at(13), None, 13)
    with db.transaction() as session:
        assert db.store.endpoint_health.claim_probe(session, row.id, at(15), at(35))  # the next delivery probes


def test_record_success_makes_the_endpoint_healthy(db: Database) -> None:
    row = _paused(db, _client(db))
    with db.transaction() as session:
        assert db.store.endpoint_health.claim_probe(session, row.id, at(14), at(34))
        db.store.endpoint_health.record_success(session, row.id, at(15))
    healed = _read(db, row.id)
    assert (healed.failures, healed.pauses, healed.paused_until, healed.probe_until) == (0, 0, None, None)
    assert (healed.paused_by, healed.resumed_at, healed.state(at(15))) == (None, at(15), "healthy")
    assert healed.last_error == "503"  # the last failure is kept for the record


def test_paused_endpoint_answers_while_relays_must_wait(db: Database) -> None:
    shop, failing = _client(db), _client(db)
    url = f"{ORIGIN}/callbacks?token=x"
    with db.transaction() as session:
        health = db.store.endpoint_health
        assert health.paused_endpoint(session, shop, url, at(0)) is None  # no row
        assert health.paused_endpoint(session, shop, None, at(0)) is None  # no URL
    _fail(db, failing, 1)
    with db.transaction() as session:
        assert db.store.endpoint_health.paused_endpoint(session, failing, url, at(1)) is None  # failing, not paused
    row = _paused(db, shop)
    with db.transaction() as session:
        health = db.store.endpoint_health
        found = health.paused_endpoint(session, shop, url, at(5))
        assert found is not None and found.id == row.id
        assert health.paused_endpoint(session, shop, url, at(13)) is None  # the pause ran out: a relay may probe
        assert health.claim_probe(session, row.id, at(14), at(34))
    with db.transaction() as session:
        health = db.store.endpoint_health
        probing = health.paused_endpoint(session, shop, url, at(15))  # a probe in flight: the others wait
        assert probing is not None and probing.id == row.id
        assert health.paused_endpoint(session, shop, "https://elsewhere.example/cb", at(5)) is None
        assert health.paused_endpoint(session, shop, "not a url", at(5)) is None  # no origin


def test_unhealthy_lists_failing_endpoints_with_their_clients_in_order(db: Database) -> None:
    before = _unhealthy_ids(db)
    shop, other = _client(db), _client(db)
    paused = _paused(db, shop)
    failing, _ = _fail(db, other, 4)
    healed, _ = _fail(db, other, 5, origin="https://healed.example")
    with db.transaction() as session:
        db.store.endpoint_health.record_success(session, healed.id, at(6))
    with db.transaction() as session:
        rows = [row for row in db.store.endpoint_health.unhealthy(session) if row.id not in before]
        assert [(row.id, row.client.id, row.state(at(5))) for row in rows] == [
            (paused.id, shop, "paused"),
            (failing.id, other, "failing"),
        ]


def _unhealthy_ids(db: Database) -> set[int]:
    with db.transaction() as session:
        return {row.id for row in db.store.endpoint_health.unhealthy(session)}
