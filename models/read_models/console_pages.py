"""What the console's pages read besides the overview, the lists (``models.read_models.lists``) and a
task's page (``models.read_models.task_page``): one dead letter, incident, orphan event or callback endpoint with its
operator history, how many open dead letters a replay would take, the clients' list. Kept here so
the console's views build no query; each function reads in the caller's session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session, defer

from core.urls import strip_url
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.audit import OperatorEvent
from models.client import ApiKey, Client
from models.endpoint_health import EndpointHealth
from models.messages import DeadLetter, OutboxMessage
from models.read_models import lists
from models.store import store_of

#: the most clients the clients' page lists
CLIENTS_LIMIT = 1000


def stored_text(session: Session, column: Any, key: Any, key_value: int) -> str | None:
    """A JSON column of the row whose ``key`` is ``key_value`` (a task's input or outcome, a
    payload), read as text: a row stored before the depth limit existed may be too deep to decode,
    and is then still shown as stored."""
    return session.scalar(select(cast(column, Text)).where(key == key_value))


# --- dead letters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetterPage:
    letter: DeadLetter
    task_id: int | None  # the task of its outbox row, if it has one
    payload_text: str | None  # as stored
    history: list[OperatorEvent]


def dead_letter_without_payload(session: Session, letter_id: int) -> DeadLetter | None:
    return session.get(DeadLetter, letter_id, options=[defer(DeadLetter.payload)])


def dead_letter_page(session: Session, letter_id: int) -> DeadLetterPage | None:
    """The dead letter, its task, its payload as stored and its operator history (None: no such letter)."""
    letter = dead_letter_without_payload(session, letter_id)
    if letter is None:
        return None
    task_id = None
    if letter.outbox_id is not None:
        task_id = session.scalar(select(OutboxMessage.task_id).where(OutboxMessage.id == letter.outbox_id))
    return DeadLetterPage(
        letter=letter,
        task_id=task_id,
        payload_text=stored_text(session, DeadLetter.payload, DeadLetter.id, letter_id),
        history=operator_history(session, "dead_letter", letter_id),
    )


def letter_tasks(session: Session, letters: list[DeadLetter]) -> dict[int, int]:
    """The task of each of these dead letters that has one, by dead letter id (one query)."""
    outbox_ids = {d.outbox_id for d in letters if d.outbox_id is not None}
    if not outbox_ids:
        return {}
    rows = session.execute(
        select(OutboxMessage.id, OutboxMessage.task_id).where(
            OutboxMessage.id.in_(outbox_ids), OutboxMessage.task_id.is_not(None)
        )
    ).tuples()
    task_of = {outbox_id: task_id for outbox_id, task_id in rows if task_id is not None}
    return {d.id: task_of[d.outbox_id] for d in letters if d.outbox_id in task_of}


def open_matching(session: Session, flt: lists.DeadLetterFilter, now: datetime) -> int:
    """How many open dead letters match the filter now: what a replay of every match would take."""
    count = session.scalar(
        flt.apply(select(func.count()).select_from(DeadLetter), now).where(DeadLetter.state == "open")
    )
    return int(count or 0)


# --- incidents and orphan events -------------------------------------------------------------


def _subject_ids(subject: str) -> tuple[int | None, int | None]:
    """(outbox id, task id) an incident's subject names: ``outbox:<id>`` (a dead letter's) or
    ``<deadline>:task:<id>`` (a deadline's); neither for the rest (orphans, jobs, endpoints)."""
    parts = subject.split(":")
    if len(parts) == 2 and parts[0] == "outbox" and parts[1].isdigit():
        return int(parts[1]), None
    if len(parts) == 3 and parts[1] == "task" and parts[2].isdigit():
        return None, int(parts[2])
    return None, None


def incident_tasks(session: Session, incidents: list[Incident]) -> dict[int, int]:
    """The task of each of these incidents that names one, by incident id (at most one query)."""
    named = {i.id: _subject_ids(i.subject) for i in incidents}
    outbox_ids = {outbox_id for outbox_id, _ in named.values() if outbox_id is not None}
    task_of: dict[int, int] = {}
    if outbox_ids:
        rows = session.execute(
            select(OutboxMessage.id, OutboxMessage.task_id).where(
                OutboxMessage.id.in_(outbox_ids), OutboxMessage.task_id.is_not(None)
            )
        ).tuples()
        task_of = {outbox_id: task_id for outbox_id, task_id in rows if task_id is not None}
    found: dict[int, int] = {}
    for incident_id, (outbox_id, task_id) in named.items():
        if task_id is None and outbox_id is not None:
            task_id = task_of.get(outbox_id)
        if task_id is not None:
            found[incident_id] = task_id
    return found


@dataclass(frozen=True)
class IncidentPage:
    incident: Incident
    history: list[OperatorEvent]


def incident_page(session: Session, incident_id: int) -> IncidentPage | None:
    incident = session.get(Incident, incident_id)
    if incident is None:
        return None
    return IncidentPage(incident=incident, history=operator_history(session, "incident", incident_id))


@dataclass(frozen=True)
class OrphanPage:
    orphan: OrphanEvent
    payload_text: str | None  # as stored
    history: list[OperatorEvent]


def orphan_without_payload(session: Session, orphan_id: int) -> OrphanEvent | None:
    return session.get(OrphanEvent, orphan_id, options=[defer(OrphanEvent.payload)])


def orphan_page(session: Session, orphan_id: int) -> OrphanPage | None:
    orphan = orphan_without_payload(session, orphan_id)
    if orphan is None:
        return None
    return OrphanPage(
        orphan=orphan,
        payload_text=stored_text(session, OrphanEvent.payload, OrphanEvent.id, orphan_id),
        history=operator_history(session, "orphan", orphan_id),
    )


# --- callback endpoints and clients ----------------------------------------------------------


@dataclass(frozen=True)
class EndpointsPage:
    disabled: list[CallbackEndpoint]  # parked by 410 Gone
    unhealthy: list[EndpointHealth]  # failing, paused or probing
    history: dict[int, list[OperatorEvent]]  # each disabled endpoint's newest operator events


def endpoints_page(session: Session, history_limit: int = 5) -> EndpointsPage:
    disabled = lists.disabled_endpoints(session)
    failing = store_of(session).endpoint_health.unhealthy(session)
    history = {e.id: operator_history(session, "endpoint", e.id, limit=history_limit) for e in disabled}
    return EndpointsPage(disabled=disabled, unhealthy=failing, history=history)


def callback_endpoint(session: Session, endpoint_id: int) -> CallbackEndpoint | None:
    return session.get(CallbackEndpoint, endpoint_id)


@dataclass(frozen=True)
class ClientRow:
    """A client as the console lists it: how many secrets, keys and origins, never what they are."""

    name: str
    callback_url: str | None  # stripped of its secrets
    secrets: int
    keys: int  # live API keys: neither retired nor revoked
    origins: int
    disabled_at: datetime | None


def client_rows(session: Session, limit: int = CLIENTS_LIMIT) -> list[ClientRow]:
    """The clients by name (at most ``limit``)."""
    live_keys = {
        int(client_id): int(n)
        for client_id, n in session.execute(
            select(ApiKey.client_id, func.count())
            .where(ApiKey.retired_at.is_(None), ApiKey.revoked_at.is_(None))
            .group_by(ApiKey.client_id)
        )
    }
    return [
        ClientRow(
            name=c.name,
            callback_url=strip_url(c.callback_url) if c.callback_url else None,
            secrets=len(c.callback_secrets or []),
            keys=live_keys.get(c.id, 0),
            origins=len(c.callback_origins or []),
            disabled_at=c.disabled_at,
        )
        for c in session.scalars(select(Client).order_by(Client.name).limit(limit))
    ]


def operator_history(session: Session, subject: str, subject_id: int, limit: int = 200) -> list[OperatorEvent]:
    """What operators did to the subject (``models.audit``), oldest first."""
    return list(
        session.scalars(
            select(OperatorEvent)
            .where(OperatorEvent.subject == subject, OperatorEvent.subject_id == subject_id)
            .order_by(OperatorEvent.id)
            .limit(limit)
        )
    )
