"""What needs a person, as statements (``models.attention``, ``models.messages.DeadLetter``):
dead letters a bulk replay takes, incidents found by their open key, orphan events left unbound,
callback endpoints disabled by 410 Gone and the relays parked on them, and the clients operators
name (``service.dead_letters``, ``service.incidents``, ``service.orphans``,
``service.operator_actions`` decide; these read, claim and write).

Both databases run the same statements (SQLite renders no ``FOR UPDATE``: ``BEGIN IMMEDIATE``
serialised the transaction already), so one class, :class:`Attention`, serves both stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Row, Select, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.classify import Fault
from core.outbox_states import ParkedReason
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.client import Client
from models.messages import DeadLetter, OutboxMessage
from models.task import ExternalTask


class LetterScope(Protocol):
    """Which dead letters an operator means (``service.queries.DeadLetterFilter``): its conditions
    added to a statement over ``dead_letters``."""

    def apply(self, query: Select[Any], now: datetime) -> Select[Any]: ...


class Attention:
    """The verbs of what needs a person, alike on both databases."""

    # --- dead letters ---------------------------------------------------------------------------

    def letters_to_replay(
        self,
        session: Session,
        scope: LetterScope,
        now: datetime,
        after_id: int,
        size: int,
        *,
        caller_fault: bool = True,
    ) -> Sequence[DeadLetter]:
        """A bulk replay's next batch: up to ``size`` letters ``scope`` matches after ``after_id``, in
        id order, locked (one another transaction holds is skipped, so two operators never replay
        one letter twice); without the caller's fault's unless ``caller_fault``."""
        query = scope.apply(select(DeadLetter), now)
        if not caller_fault:
            query = query.where(DeadLetter.fault != Fault.CALLER)
        return session.scalars(
            query.where(DeadLetter.id > after_id).order_by(DeadLetter.id).limit(size).with_for_update(skip_locked=True)
        ).all()

    def count_caller_fault(self, session: Session, scope: LetterScope, now: datetime) -> int:
        """How many letters of the caller's fault ``scope`` matches."""
        query = scope.apply(select(func.count()).select_from(DeadLetter), now)
        return int(session.scalar(query.where(DeadLetter.fault == Fault.CALLER)) or 0)

    # --- incidents ------------------------------------------------------------------------------

    def open_incident(self, session: Session, open_key: str) -> Incident | None:
        """The open incident with that key (``kind:subject`` hashed; NULL once resolved), if any."""
        return session.scalar(select(Incident).where(Incident.open_key == open_key))

    def add_incident(self, session: Session, incident: Incident) -> Incident:
        """Write a new open incident; a concurrent opener's, when one won the unique ``open_key``
        (this one's savepoint rolled back then)."""
        try:
            with session.begin_nested():
                session.add(incident)
        except IntegrityError:
            return session.scalars(select(Incident).where(Incident.open_key == incident.open_key)).one()
        return incident

    # --- orphan events --------------------------------------------------------------------------

    def stale_orphans(
        self, session: Session, now: datetime, window_s: int, batch: int
    ) -> Sequence[Row[tuple[int, str, str, str]]]:
        """Up to ``batch`` open orphans unbound past the window and not flagged yet, oldest first,
        locked (skipping those another transaction holds): id, source, job id and the event's type,
        read in SQL (``payload->>'type'``: the payload holds the vendor's outcome, not loaded)."""
        return session.execute(
            select(
                OrphanEvent.id, OrphanEvent.source, OrphanEvent.vendor_job_id, OrphanEvent.payload["type"].as_string()
            )
            .where(
                text("state = 'open' AND flagged_at IS NULL"),
                OrphanEvent.received_at <= now - timedelta(seconds=window_s),
            )
            .order_by(OrphanEvent.received_at)
            .limit(batch)
            .with_for_update(skip_locked=True)
        ).all()

    def flag_orphans(self, session: Session, orphan_ids: Sequence[int], now: datetime) -> None:
        """These orphans have their incident (off the unflagged index): one statement for them all."""
        if orphan_ids:
            session.execute(update(OrphanEvent).where(OrphanEvent.id.in_(orphan_ids)).values(flagged_at=now))

    # --- callback endpoints disabled by 410 Gone -------------------------------------------------

    def endpoint(self, session: Session, client_id: int, url_hash: str) -> CallbackEndpoint | None:
        """The client's endpoint of that (whole URL's) hash, disabled or not."""
        return session.scalar(
            select(CallbackEndpoint).where(
                CallbackEndpoint.client_id == client_id, CallbackEndpoint.url_hash == url_hash
            )
        )

    def disabled_count(self, session: Session, client_id: int) -> int:
        """How many of the client's endpoints are disabled."""
        return (
            session.scalar(
                select(func.count())
                .select_from(CallbackEndpoint)
                .where(CallbackEndpoint.client_id == client_id, CallbackEndpoint.disabled_at.is_not(None))
            )
            or 0
        )

    def disabled_endpoints(self, session: Session, client_id: int, shown: str) -> Sequence[CallbackEndpoint]:
        """The client's disabled endpoints whose stripped URL is ``shown``, row-locked."""
        return session.scalars(
            select(CallbackEndpoint)
            .where(
                CallbackEndpoint.client_id == client_id,
                CallbackEndpoint.url == shown,
                CallbackEndpoint.disabled_at.is_not(None),
            )
            .with_for_update()
        ).all()

    def disabled_endpoint_ids(self, session: Session, client_id: int, shown: str) -> Sequence[int]:
        """The ids of the client's disabled endpoints whose stripped URL is ``shown`` (not locked)."""
        return session.scalars(
            select(CallbackEndpoint.id).where(
                CallbackEndpoint.client_id == client_id,
                CallbackEndpoint.url == shown,
                CallbackEndpoint.disabled_at.is_not(None),
            )
        ).all()

    def clients_disabling(self, session: Session, shown: str) -> set[int]:
        """The clients with a disabled endpoint whose stripped URL is ``shown``."""
        return set(
            session.scalars(
                select(CallbackEndpoint.client_id).where(
                    CallbackEndpoint.url == shown, CallbackEndpoint.disabled_at.is_not(None)
                )
            )
        )

    def parked_relays(self, session: Session, client_id: int, shown: str) -> Sequence[OutboxMessage]:
        """The client's relays parked on the endpoint ``shown`` (410 Gone), not done, in id order,
        row-locked (the rows only, not their tasks)."""
        return session.scalars(
            select(OutboxMessage)
            .join(ExternalTask, ExternalTask.id == OutboxMessage.task_id)
            .where(
                OutboxMessage.parked_reason == ParkedReason.ENDPOINT_GONE.value,
                OutboxMessage.target == shown,
                OutboxMessage.done_at.is_(None),
                ExternalTask.client_id == client_id,
            )
            .order_by(OutboxMessage.id)
            .with_for_update(of=OutboxMessage)
        ).all()

    # --- the clients operators name -------------------------------------------------------------

    def client_named(self, session: Session, name: str) -> Client | None:
        return session.scalar(select(Client).where(Client.name == name))

    def client_names(self, session: Session, client_ids: set[int]) -> list[str]:
        """The names of these clients, sorted."""
        return sorted(session.scalars(select(Client.name).where(Client.id.in_(client_ids))))
