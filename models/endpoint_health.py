"""The health of each client's callback endpoints (one row per client and callback origin), kept
by the relay as ``core.endpoint_health`` rules it: failures in a row, pauses, the probe.

A row exists only once an endpoint was found down (a rejected message creates none); a healthy
client's relays read no row: their start statement only asks whether the client has a failing
endpoint at all (``service.claims``), and looks up its one row by origin when it has. Health costs
the happy path no statement.
Keyed by (client, origin): one tenant's failing endpoint never pauses another tenant's calls to
the same host, and one slow path of a host pauses the host (its sockets are what a slow endpoint
costs). 410 Gone is kept apart, per whole URL, in ``models.attention.CallbackEndpoint``.

This module holds the table and what is read off a row; the statements that write and find the
rows are the store's (``models.store.endpoint_health``: ``store_of(session).endpoint_health``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from core.endpoint_health import Health
from models.base import Base, Id, UtcDateTime
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
