"""A client's callback endpoints' health rows (``models.endpoint_health.EndpointHealth``: one per
client and callback origin, made once the endpoint was found down), kept by the relay as
``core.endpoint_health`` rules it: a failure counted, the probe claimed and handed on, the reset;
and the reads that show them (a task's page, the console, the admin API).

Both databases run the same statements (``INSERT … ON CONFLICT DO NOTHING`` and
``UPDATE … RETURNING`` on both; SQLite ignores the failure's ``FOR UPDATE``, its ``BEGIN IMMEDIATE``
serialises writers), so one class serves both stores.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session, joinedload

from core.endpoint_health import HealthPolicy, after_failure
from core.origins import origin_of
from models.base import UtcDateTime, upsert
from models.endpoint_health import MAX_ERROR_CHARS, EndpointHealth, origin_hash


class EndpointHealthRows:
    """The verbs of endpoint health, alike on both databases."""

    def find(self, session: Session, client_id: int, origin: str) -> EndpointHealth | None:
        """The client's row for ``origin`` (one at most: the unique key), if it was ever found down."""
        return session.scalar(_FIND, {"client_id": client_id, "origin_hash": origin_hash(origin)})

    def record_failure(
        self,
        session: Session,
        client_id: int,
        origin: str,
        error: str,
        now: datetime,
        policy: HealthPolicy,
        delivery: int | None = None,
    ) -> tuple[EndpointHealth, bool]:
        """Count a delivery (``delivery``: its outbox id) that found the endpoint down (the row created
        on the first), under the row's lock: failures of one endpoint from several workers count one
        after another. True when this failure paused it."""
        hashed = origin_hash(origin)
        session.execute(_ENSURE, {"client_id": client_id, "origin_hash": hashed, "origin": origin})
        row = session.scalars(
            select(EndpointHealth)
            .where(EndpointHealth.client_id == client_id, EndpointHealth.origin_hash == hashed)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one()
        health_before = row.health
        health = after_failure(health_before, now, policy, delivery)
        row.failures, row.pauses = health.failures, health.pauses
        row.paused_until, row.probe_until, row.paused_by = health.paused_until, health.probe_until, health.paused_by
        row.last_error, row.last_failure_at = error[:MAX_ERROR_CHARS], now
        return row, health.pauses > health_before.pauses

    def claim_probe(self, session: Session, row_id: int, now: datetime, probe_until: datetime) -> bool:
        """Be the one delivery that probes an endpoint whose pause ran out. A conditional UPDATE: two
        relays starting at once meet at the row, and the second finds the probe taken."""
        params = {"row_id": row_id, "now": now, "probe_until": probe_until}
        return session.execute(_CLAIM_PROBE, params).first() is not None

    def record_success(self, session: Session, row_id: int, now: datetime) -> None:
        """A delivery to a failing or paused endpoint succeeded: it is healthy again."""
        session.execute(_RESUME, {"row_id": row_id, "now": now})

    def hand_on_probe(self, session: Session, row_id: int, probe_until: datetime) -> None:
        """The probe (the one that claimed it until ``probe_until``) was rejected: the endpoint is up
        and refused that message. The probe is free again at once, the pause not lengthened
        (``core.endpoint_health.after_rejection``); a probe taken since by another relay is left alone."""
        # no key may be named as a column: an UPDATE's parameter of that name becomes a SET clause
        session.execute(_HAND_ON_PROBE, {"row_id": row_id, "held_until": probe_until})

    def paused_endpoint(
        self, session: Session, client_id: int, url: str | None, now: datetime
    ) -> EndpointHealth | None:
        """The client's endpoint for ``url``, if it is paused (or probing) now: why its callbacks wait."""
        origin = origin_of(url) if url else None
        if origin is None:
            return None
        row = session.scalar(
            select(EndpointHealth).where(
                EndpointHealth.client_id == client_id, EndpointHealth.origin_hash == origin_hash(origin)
            )
        )
        return row if row is not None and row.health.paused_at(now) else None

    def unhealthy(self, session: Session) -> list[EndpointHealth]:
        """Every endpoint failing, paused or probing, with its client: the console's and admin API's list."""
        return list(
            session.scalars(
                select(EndpointHealth)
                .where(EndpointHealth.failures > 0)
                .options(joinedload(EndpointHealth.client))
                .order_by(EndpointHealth.id)
            )
        )


_TABLE = EndpointHealth.__table__
assert isinstance(_TABLE, Table)  # Core statements on the table: built once, cached, no unit-of-work lookups
_ENSURE = upsert(
    "INSERT INTO endpoint_health (client_id, origin_hash, origin, failures, pauses)"
    " VALUES (:client_id, :origin_hash, :origin, 0, 0) ON CONFLICT (client_id, origin_hash) DO NOTHING"
)
_CLAIM_PROBE = (
    update(_TABLE)
    .where(
        _TABLE.c.id == bindparam("row_id"),
        _TABLE.c.paused_until <= bindparam("now", type_=UtcDateTime()),
        (_TABLE.c.probe_until.is_(None)) | (_TABLE.c.probe_until <= bindparam("now", type_=UtcDateTime())),
    )
    .values(probe_until=bindparam("probe_until", type_=UtcDateTime()))
    .returning(_TABLE.c.id)
)
_RESUME = (
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("row_id"))
    .values(
        failures=0,
        pauses=0,
        paused_until=None,
        probe_until=None,
        paused_by=None,
        resumed_at=bindparam("now", type_=UtcDateTime()),
    )
)
_HAND_ON_PROBE = (
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("row_id"), _TABLE.c.probe_until == bindparam("held_until", type_=UtcDateTime()))
    .values(probe_until=None)
)
_FIND = (
    select(EndpointHealth)
    .where(EndpointHealth.client_id == bindparam("client_id"), EndpointHealth.origin_hash == bindparam("origin_hash"))
    .execution_options(populate_existing=True)
)
