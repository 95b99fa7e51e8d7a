"""The health of each client's callback endpoints (one row per client and callback origin), kept
by the relay as ``core.endpoint_health`` rules it: failures in a row, pauses, the probe.

A row exists only once an endpoint was found down (a rejected message creates none); a healthy
client's relays read no row: their start statement only asks whether the client has a failing
endpoint at all (``service.claims``), and looks up its one row by origin when it has. Health costs
the happy path no statement.
Keyed by (client, origin): one tenant's failing endpoint never pauses another tenant's calls to
the same host, and one slow path of a host pauses the host (its sockets are what a slow endpoint
costs). 410 Gone is kept apart, per whole URL, in ``models.attention.CallbackEndpoint``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Table, Text, UniqueConstraint, bindparam, select, update
from sqlalchemy.orm import Mapped, Session, joinedload, mapped_column, relationship

from core.endpoint_health import Health, HealthPolicy, after_failure
from core.origins import origin_of
from models.base import Base, Id, UtcDateTime, upsert
from models.client import Client

#: The longest error text kept (the relay's error names only host[:port] and a status).
MAX_ERROR_CHARS = 500


class EndpointHealth(Base):
    __tablename__ = "endpoint_health"
    __table_args__ = (UniqueConstraint("client_id", "origin_hash"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"))
    origin_hash: Mapped[str] = mapped_column(String(64))
    origin: Mapped[str] = mapped_column(String(300))  # scheme://host[:port]: no path, query or userinfo
    failures: Mapped[int] = mapped_column(Integer, default=0)
    pauses: Mapped[int] = mapped_column(Integer, default=0)
    paused_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    probe_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: the outbox id of the delivery whose failure began the pause (core.endpoint_health: not the next probe)
    paused_by: Mapped[int | None] = mapped_column(BigInteger)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_failure_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    resumed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)

    client: Mapped[Client] = relationship()

    @property
    def health(self) -> Health:
        return Health(self.failures, self.pauses, self.paused_until, self.probe_until, self.paused_by)

    def state(self, now: datetime) -> str:
        return health_state(self.failures, self.paused_until, self.probe_until, now)


def health_state(failures: int, paused_until: datetime | None, probe_until: datetime | None, now: datetime) -> str:
    """What the console, the admin API and ``/metrics`` show: ``paused`` (its relays wait; also once
    the pause ran out, until the next delivery probes it), ``probing`` (one delivery is trying it),
    ``failing`` (not yet paused) or ``healthy``."""
    if probe_until is not None and probe_until > now and (paused_until is None or paused_until <= now):
        return "probing"
    if paused_until is not None:
        return "paused"
    return "failing" if failures else "healthy"


#: The states of an endpoint that is not healthy, in the order they are shown.
UNHEALTHY_STATES = ("failing", "paused", "probing")


def origin_hash(origin: str) -> str:
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


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


def claim_probe(session: Session, row_id: int, now: datetime, probe_until: datetime) -> bool:
    """Be the one delivery that probes an endpoint whose pause ran out. A conditional UPDATE: two
    relays starting at once meet at the row, and the second finds the probe taken."""
    params = {"row_id": row_id, "now": now, "probe_until": probe_until}
    return session.execute(_CLAIM_PROBE, params).first() is not None


def record_success(session: Session, row_id: int, now: datetime) -> None:
    """A delivery to a failing or paused endpoint succeeded: it is healthy again."""
    session.execute(_RESUME, {"row_id": row_id, "now": now})


def hand_on_probe(session: Session, row_id: int, probe_until: datetime) -> None:
    """The probe (the one that claimed it until ``probe_until``) was rejected: the endpoint is up
    and refused that message. The probe is free again at once, the pause not lengthened
    (``core.endpoint_health.after_rejection``); a probe taken since by another relay is left alone."""
    # no key may be named as a column: an UPDATE's parameter of that name becomes a SET clause
    session.execute(_HAND_ON_PROBE, {"row_id": row_id, "held_until": probe_until})


def find(session: Session, client_id: int, origin: str) -> EndpointHealth | None:
    """The client's row for ``origin`` (one at most: the unique key), if it was ever found down."""
    return session.scalar(_FIND, {"client_id": client_id, "origin_hash": origin_hash(origin)})


def record_failure(
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


def paused_endpoint(session: Session, client_id: int, url: str | None, now: datetime) -> EndpointHealth | None:
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


def unhealthy(session: Session) -> list[EndpointHealth]:
    """Every endpoint failing, paused or probing, with its client: the console's and admin API's list."""
    return list(
        session.scalars(
            select(EndpointHealth)
            .where(EndpointHealth.failures > 0)
            .options(joinedload(EndpointHealth.client))
            .order_by(EndpointHealth.id)
        )
    )
