"""``models.store.endpoint_health`` (the rows of ``models.endpoint_health``): failures counted per client
and origin, the pause, one probe, the reset."""

from __future__ import annotations

from core.endpoint_health import HealthPolicy
from models.db import Database
from models.endpoint_health import EndpointHealth
from tests.middle.builders import later, new_client

POLICY = HealthPolicy(failures_to_pause=3, pause_s=10, pause_cap_s=40, probe_s=20)
ORIGIN = "https://shop.example"


def _fail(db: Database, client_id: int, seconds: float, origin: str = ORIGIN) -> tuple[EndpointHealth, bool]:
    with db.transaction() as session:
        return db.store.endpoint_health.record_failure(
            session, client_id, origin, "read timeout after 15s", later(seconds), POLICY
        )


def test_failures_in_a_row_pause_the_endpoint_of_that_client_only(db: Database) -> None:
    with db.transaction() as session:
        shop, other = new_client(session).id, new_client(session).id
    assert [_fail(db, shop, s)[1] for s in (1, 2, 3)] == [False, False, True]
    row, _ = _fail(db, other, 4)
    assert (row.failures, row.paused_until) == (1, None)  # the same origin, another client: its own count
    row, paused = _fail(db, shop, 5)  # a delivery that was in flight: counted, the pause stands
    assert (row.failures, row.pauses, row.paused_until, paused) == (4, 1, later(13), False)
    with db.transaction() as session:
        assert [(h.client_id, h.state(later(5))) for h in db.store.endpoint_health.unhealthy(session)] == [
            (shop, "paused"),
            (other, "failing"),
        ]


def test_one_probe_at_a_time_then_a_success_resets_everything(db: Database) -> None:
    with db.transaction() as session:
        shop = new_client(session).id
    for s in (1, 2, 3):
        row, _ = _fail(db, shop, s)
    with db.transaction() as session:
        assert not db.store.endpoint_health.claim_probe(session, row.id, later(12), later(32))  # still paused
        assert db.store.endpoint_health.claim_probe(session, row.id, later(14), later(34))
        assert not db.store.endpoint_health.claim_probe(session, row.id, later(15), later(35))  # the probe is taken
    again, paused = _fail(db, shop, 16)  # the probe failed: twice as long
    assert (again.pauses, again.paused_until, again.probe_until, paused) == (2, later(36), None, True)
    with db.transaction() as session:
        assert db.store.endpoint_health.claim_probe(session, row.id, later(37), later(57))
        db.store.endpoint_health.record_success(session, row.id, later(38))
    with db.transaction() as session:
        healed = session.get(EndpointHealth, row.id)
        assert healed is not None
        assert (healed.failures, healed.pauses, healed.paused_until, healed.resumed_at) == (0, 0, None, later(38))
        assert db.store.endpoint_health.unhealthy(session) == []


def test_a_rejected_probe_frees_the_probe_at_once_and_the_pause_stands(db: Database) -> None:
    """``hand_on_probe``: only the probe that holds it frees it; the pause is not lengthened."""
    with db.transaction() as session:
        shop = new_client(session).id
    for s, delivery in ((1, 11), (2, 12), (3, 13)):
        with db.transaction() as session:
            row, _ = db.store.endpoint_health.record_failure(session, shop, ORIGIN, "503", later(s), POLICY, delivery)
    assert (row.pauses, row.paused_until, row.paused_by) == (1, later(13), 13)
    with db.transaction() as session:
        assert db.store.endpoint_health.claim_probe(session, row.id, later(14), later(34))
        db.store.endpoint_health.hand_on_probe(session, row.id, later(99))  # not this probe's: nothing changes
        assert not db.store.endpoint_health.claim_probe(session, row.id, later(15), later(35))
        db.store.endpoint_health.hand_on_probe(session, row.id, later(34))  # the probe's own: freed
    with db.transaction() as session:
        freed = session.get(EndpointHealth, row.id)
        assert freed is not None
        assert (freed.pauses, freed.paused_until, freed.probe_until, freed.paused_by) == (1, later(13), None, 13)
        assert db.store.endpoint_health.claim_probe(
            session, row.id, later(15), later(35)
        )  # the next delivery probes at once
