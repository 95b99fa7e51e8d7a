"""Operator actions shared by the admin API, the CLI and the console: each one transaction (whose
outbox rows the session hook publishes after commit, ``models.publishing``), which also records who
did it (``actor``) on the thing it touched: the task's timeline (``by``), and the operator events of
a dead letter, incident, orphan or endpoint (``models.audit``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from sqlalchemy.orm import Session

from core.classify import Fault
from core.urls import strip_url
from models import audit
from models.attention import Incident, OrphanEvent
from models.client import Client
from models.db import Database
from models.messages import DeadLetter
from models.notifications import NotificationMute
from models.read_models.lists import DeadLetterFilter
from models.store import store_of
from models.task import ExternalTask
from service.claims import lock_task
from service.dead_letters import NotReplayable, discard, enable_endpoint, replay
from service.incidents import resolve_incident
from service.lifecycle import AlreadyFinal, request_cancel
from service.orphans import attach_orphan, discard_orphan
from service.outbox_rows import add_event

T = TypeVar("T")

#: who did it, when the caller does not say (the admin API and the CLI name themselves)
UNKNOWN_ACTOR = "operator"
log = logging.getLogger(__name__)


class NotFoundError(LookupError):
    """No such record (→ 404 in the API, an error message in the CLI)."""


class Ambiguous(LookupError):
    """A name several clients use, given without the client (→ 422 naming ``client``, or a CLI error)."""


def client_named(session: Session, name: str) -> Client:
    client = store_of(session).attention.client_named(session, name)
    if client is None:
        raise NotFoundError(f"no client named {name!r}")
    return client


def _one_client(client_ids: set[int], session: Session, what: str) -> int:
    """The one client among ``client_ids``; operators must name it when there are several."""
    if len(client_ids) > 1:
        names = store_of(session).attention.client_names(session, client_ids)
        raise Ambiguous(f"{what} belongs to {len(names)} clients ({', '.join(names)}): name one with the client option")
    return next(iter(client_ids))


def task_for_operator(
    session: Session, correlation_id: str, client_name: str | None, *, lock: bool = False
) -> ExternalTask:
    """The task with that correlation id, for operators. Correlation ids are unique per client only:
    the client must be named when more than one has a task of that name."""
    client_id = client_named(session, client_name).id if client_name is not None else None
    tasks = store_of(session).lifecycle.tasks_named(session, correlation_id, client_id, 50)
    if not tasks:
        raise NotFoundError(f"no task {correlation_id}" + (f" for client {client_name!r}" if client_name else ""))
    client_id = _one_client({t.client_id for t in tasks}, session, f"correlation id {correlation_id!r}")
    task = next(t for t in tasks if t.client_id == client_id)
    return lock_task(session, task.id) if lock else task


def _locked(session: Session, model: type[T], key: int, what: str) -> T:
    row = session.get(model, key, with_for_update=True)
    if row is None:
        raise NotFoundError(f"no {what} {key}")
    return row


def replay_one(db: Database, letter_id: int, now: datetime, actor: str = UNKNOWN_ACTOR) -> DeadLetter:
    with db.transaction() as session:
        letter = _locked(session, DeadLetter, letter_id, "dead letter")
        replay(session, letter, now, by=actor)
        audit.record(session, "dead_letter", letter.id, "replayed", actor, now)
    return letter


def replay_matching(
    db: Database,
    flt: DeadLetterFilter,
    now: datetime,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    batch: int = 100,
    actor: str = UNKNOWN_ACTOR,
    caller_fault: bool = True,
) -> tuple[int, int]:
    """Replay every open dead letter the filter matches, in batches (each batch one transaction,
    locked with SKIP LOCKED so two operators never replay one letter twice). Returns
    (replayed, skipped); ``progress(replayed, skipped)`` after each batch. ``caller_fault=False``
    leaves letters of the caller's fault alone (see :func:`bulk_includes_caller_fault`)."""
    flt = DeadLetterFilter(**{**flt.__dict__, "state": "open"})
    replayed = skipped = 0
    after_id = 0
    while limit is None or replayed < limit:
        size = batch if limit is None else min(batch, limit - replayed)
        with db.transaction() as session:
            letters = store_of(session).attention.letters_to_replay(
                session, flt, now, after_id, size, caller_fault=caller_fault
            )
            _lock_tasks_of(session, letters)
            for letter in letters:
                after_id = letter.id
                try:
                    replay(session, letter, now, by=actor)
                    audit.record(session, "dead_letter", letter.id, "replayed", actor, now, matching=True)
                    replayed += 1
                except NotReplayable:
                    skipped += 1
        if progress is not None and letters:
            progress(replayed, skipped)
        if len(letters) < size:
            break
    return replayed, skipped


#: what every bulk replay says about the letters of the caller's fault
CALLER_FAULT_WARNING = (
    "the vendor (or the caller's own endpoint) refused what the caller gave: replayed unchanged, it is"
    " refused again; replay them only after the cause is fixed at the vendor or the input is no longer refused"
)


def bulk_includes_caller_fault(flt: DeadLetterFilter) -> bool:
    """Whether a bulk replay (CLI ``replay-many``, the admin API, the console) takes letters of the
    caller's fault: only when its filter names ``fault=caller``, never swept up by a broader one."""
    return flt.fault == Fault.CALLER


def caller_fault_matching(session: Session, flt: DeadLetterFilter, now: datetime) -> int:
    """How many open letters of the caller's fault the filter matches: what a bulk replay warns of
    (when it takes them) or leaves (when it does not)."""
    return store_of(session).attention.count_caller_fault(
        session, DeadLetterFilter(**{**flt.__dict__, "state": "open"}), now
    )


def _lock_tasks_of(session: Session, letters: Sequence[DeadLetter]) -> None:
    """The row locks of the batch's tasks, in id order, before any letter is replayed: a replayed
    submission is released under the dispatch lock (``service.dispatch.requeue``), whose holder must
    never wait on a task, as the batch's next replay would otherwise."""
    outbox_ids = [letter.outbox_id for letter in letters if letter.outbox_id is not None]
    store_of(session).lifecycle.lock_for_replay(session, outbox_ids)


def discard_one(db: Database, letter_id: int, now: datetime, actor: str = UNKNOWN_ACTOR) -> DeadLetter:
    with db.transaction() as session:
        letter = _locked(session, DeadLetter, letter_id, "dead letter")
        discard(session, letter, now, by=actor)
        audit.record(session, "dead_letter", letter.id, "discarded", actor, now)
    return letter


def update_incident(
    db: Database,
    incident_id: int,
    now: datetime,
    *,
    owner: str | None = None,
    resolve: bool = False,
    note: str | None = None,
    actor: str = UNKNOWN_ACTOR,
) -> Incident:
    with db.transaction() as session:
        incident = _locked(session, Incident, incident_id, "incident")
        if owner is not None:
            incident.owner = owner
            audit.record(session, "incident", incident.id, "assigned", actor, now, owner=owner, note=note)
        if resolve:
            resolved = resolve_incident(incident, now, note)
            action = "resolved" if resolved else "resolve_again"
            audit.record(session, "incident", incident.id, action, actor, now, note=note)
    return incident


def enable_callback_endpoint(
    db: Database, url: str, now: datetime, client_name: str | None = None, actor: str = UNKNOWN_ACTOR
) -> int:
    """Re-enable a client's disabled endpoint (the client may be left out when only one has that URL
    disabled) and publish its parked relays; returns how many were released."""
    with db.transaction() as session:
        attention = store_of(session).attention
        if client_name is not None:
            client_id = client_named(session, client_name).id
        else:
            client_ids = attention.clients_disabling(session, strip_url(url))
            if not client_ids:
                raise NotReplayable("that callback endpoint is not disabled")
            client_id = _one_client(client_ids, session, f"the disabled endpoint {strip_url(url)}")
        endpoint_ids = attention.disabled_endpoint_ids(session, client_id, strip_url(url))
        released = enable_endpoint(session, client_id, url, now)
        for endpoint_id in endpoint_ids:
            audit.record(session, "endpoint", endpoint_id, "enabled", actor, now, released=len(released))
    return len(released)


def attach_orphan_to(
    db: Database,
    orphan_id: int,
    correlation_id: str,
    now: datetime,
    client_name: str | None = None,
    actor: str = UNKNOWN_ACTOR,
) -> OrphanEvent:
    with db.transaction() as session:
        orphan = _locked(session, OrphanEvent, orphan_id, "orphan event")
        task = task_for_operator(session, correlation_id, client_name, lock=True)
        attach_orphan(session, orphan, task, now, by=actor)
        audit.record(
            session, "orphan", orphan.id, "attached", actor, now, task_id=task.id, correlation_id=correlation_id
        )
    return orphan


def discard_orphan_one(db: Database, orphan_id: int, now: datetime, actor: str = UNKNOWN_ACTOR) -> OrphanEvent:
    with db.transaction() as session:
        orphan = _locked(session, OrphanEvent, orphan_id, "orphan event")
        discard_orphan(session, orphan, now)
        audit.record(session, "orphan", orphan.id, "discarded", actor, now)
    return orphan


def cancel_task(db: Database, task_id: int, now: datetime, actor: str = UNKNOWN_ACTOR) -> ExternalTask:
    """Cancel a task as an operator (the domain app's cancel, with the operator on the timeline);
    a final task cannot be (→ NotReplayable, a 409)."""
    with db.transaction() as session:
        if session.get(ExternalTask, task_id) is None:
            raise NotFoundError(f"no task {task_id}")
        task = lock_task(session, task_id)
        try:
            request_cancel(session, task, f"canceled by operator {actor}", now)
        except AlreadyFinal as exc:
            raise NotReplayable(f"the task is {task.state} already") from exc
        add_event(session, task, "operator.cancel", now, by=actor)
    return task


__all__ = [
    "Ambiguous",
    "NotFoundError",
    "NotReplayable",
    "attach_orphan_to",
    "cancel_task",
    "client_named",
    "discard_one",
    "discard_orphan_one",
    "enable_callback_endpoint",
    "replay_matching",
    "replay_one",
    "task_for_operator",
    "update_incident",
]


def mute_notifications(
    db: Database,
    kind: str,
    now: datetime,
    *,
    by: str | None = None,
    note: str | None = None,
    actor: str = UNKNOWN_ACTOR,
) -> tuple[NotificationMute, bool]:
    """Silence an incident kind's notices (recorded and marked muted, not sent): the mute and
    whether it is new (a kind muted already keeps its first mute). ``by`` names the person; without
    it, the actor (the CLI's login) does."""
    with db.transaction() as session:
        created = store_of(session).notices.mute(session, kind, by or actor, note, now)
        row = session.get(NotificationMute, kind)
        assert row is not None  # just inserted, or there before
    return row, created


def unmute_notifications(db: Database, kind: str, now: datetime, actor: str = UNKNOWN_ACTOR) -> None:
    with db.transaction() as session:
        if not store_of(session).notices.unmute(session, kind):
            raise NotFoundError(f"notifications of {kind!r} are not muted")
    log.info("notifications of %s unmuted by %s", kind, actor)
