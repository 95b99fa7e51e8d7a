"""The relay's start (``service.claims.claim_relay``) costs the same however many disabled and
failing endpoints a client has (issue 44): its statement returns one row, the relay then looks up
its own URL's and origin's row (one at most each), and 410 disabled URLs raise one incident.

Before, the start joined the client's disabled endpoints with its failing ones: 410 × 410 came back
as 168,100 rows with every relay start, and each 410'd URL opened an incident of its own.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from core.endpoint_health import HealthPolicy
from core.states import EventType
from models.attention import Incident
from models.db import Database
from models.messages import OutboxMessage
from models.store import claims as store_claims
from models.store import store_of
from models.task import ExternalTask
from service import claims
from service.dead_letters import disable_endpoint, enable_endpoint, url_hash
from service.incidents import IncidentKind
from service.ordering import held_by
from service.vendor_events import receive_event
from tests.middle.builders import NOW, at_vendor, later, new_client
from webhooks.events import VendorEvent

MANY = 410
POLICY = HealthPolicy(failures_to_pause=3, pause_s=10, pause_cap_s=40, probe_s=20)


def _relay_row(session: Session) -> OutboxMessage:
    at_vendor(session, new_client(session, callback_url="https://shop.example/cb/0"), "order-1", "job-1")
    return receive_event(session, "sim", "wh-1", VendorEvent(EventType.COMPLETED, "job-1", "succeeded"), NOW).outbox[0]


def _client_of(session: Session, outbox_id: int) -> int:
    return session.scalars(
        select(ExternalTask.client_id)
        .join(OutboxMessage, OutboxMessage.task_id == ExternalTask.id)
        .where(OutboxMessage.id == outbox_id)
    ).one()


def _incidents(session: Session) -> list[Incident]:
    return list(session.scalars(select(Incident).where(Incident.kind == IncidentKind.ENDPOINT_DISABLED)))


def _statements(db: Database) -> Counter[str]:
    seen: Counter[str] = Counter()

    @event.listens_for(db.engine, "before_cursor_execute")
    def _count(conn: object, cursor: object, statement: str, *_args: object) -> None:
        seen[statement.split(None, 1)[0].upper()] += 1

    return seen


def test_a_client_with_many_disabled_and_failing_endpoints_starts_a_relay_with_one_row(db: Database) -> None:
    with db.transaction() as session:
        outbox_id = _relay_row(session).id
        client_id = _client_of(session, outbox_id)
        for i in range(MANY):  # one origin, 410 paths, each answering 410 Gone
            disable_endpoint(session, client_id, f"https://shop.example/cb/{i}", "answered 410 Gone", later(i))
        for i in range(MANY):  # 410 origins found down once each
            store_of(session).endpoint_health.record_failure(
                session, client_id, f"https://h{i}.shop.example", "503", later(i), POLICY, outbox_id
            )
        # one origin down often enough to pause it
        for n in range(3):
            store_of(session).endpoint_health.record_failure(
                session, client_id, "https://shop.example", "503", later(500 + n), POLICY, outbox_id
            )

    with db.transaction() as session:
        found = session.execute(store_claims._relay_statement(held_by), {"outbox_id": outbox_id}).all()
        assert len(found) == 1  # not 410 × 410
        seen = _statements(db)
        claim = claims.claim_relay(session, outbox_id)
        assert claim is not None and claim.any_disabled and claim.any_unhealthy
        assert sum(seen.values()) == 1
        # what the relay reads next, for its own URL and origin: one row at most each
        assert claims.disabled_endpoint(session, client_id, url_hash("https://shop.example/cb/7"))
        assert not claims.disabled_endpoint(session, client_id, url_hash(f"https://shop.example/cb/{MANY}"))
        health = store_of(session).endpoint_health.find(session, client_id, "https://shop.example")
        assert health is not None and health.pauses == 1 and health.paused_by == outbox_id
        assert store_of(session).endpoint_health.find(session, client_id, "https://elsewhere.example") is None
        assert sum(seen.values()) == 5
        # 410 URLs disabled: one open incident for the client, its detail counting them
        [incident] = _incidents(session)
        assert incident.resolved_at is None and f"{MANY} disabled callback URL(s)" in incident.detail


def test_a_healthy_client_starts_a_relay_with_nothing_to_look_up(db: Database) -> None:
    with db.transaction() as session:
        outbox_id = _relay_row(session).id
    with db.transaction() as session:
        claim = claims.claim_relay(session, outbox_id)
        assert claim is not None and not claim.any_disabled and not claim.any_unhealthy
        # a client's endpoint that answered again (failures 0) is not failing
        store_of(session).endpoint_health.record_failure(
            session, _client_of(session, outbox_id), "https://shop.example", "503", NOW, POLICY
        )
    with db.transaction() as session:
        health = store_of(session).endpoint_health.find(session, _client_of(session, outbox_id), "https://shop.example")
        assert health is not None
        store_of(session).endpoint_health.record_success(session, health.id, later(1))
    with db.transaction() as session:
        claim = claims.claim_relay(session, outbox_id)
        assert claim is not None and not claim.any_unhealthy


def test_the_clients_one_incident_stays_open_until_its_last_disabled_url_is_enabled(db: Database) -> None:
    with db.transaction() as session:
        client_id = new_client(session).id
        other = new_client(session).id
        for i in range(3):
            disable_endpoint(session, client_id, f"https://shop.example/cb/{i}", "answered 410 Gone", later(i))
        disable_endpoint(session, other, "https://shop.example/cb/0", "answered 410 Gone", later(5))
        assert len(_incidents(session)) == 2  # one per client, not per URL
        for i in range(2):
            enable_endpoint(session, client_id, f"https://shop.example/cb/{i}", later(10 + i))
        assert [i.resolved_at for i in _incidents(session)] == [None, None]
        enable_endpoint(session, client_id, "https://shop.example/cb/2", later(20))
        assert sorted((i.resolved_at is None) for i in _incidents(session)) == [False, True]
        # the client's next 410 opens a new one
        disable_endpoint(session, client_id, "https://shop.example/cb/9", "answered 410 Gone", later(30))
        assert sum(i.resolved_at is None for i in _incidents(session)) == 2
