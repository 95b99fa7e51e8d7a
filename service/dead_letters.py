"""Work that could not be done, and its repair: dead letters, replay, discard, the poison guard,
and callback endpoints disabled by 410 Gone. Each function runs in the caller's transaction."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.classify import Fault
from core.outbox_states import ParkedReason
from core.states import TERMINAL, State, reopen
from core.urls import strip_url
from models.attention import CallbackEndpoint
from models.client import Client
from models.messages import POISON, DeadLetter, OutboxKind, OutboxMessage
from models.publishing import publish_after_commit
from models.store import store_of
from models.task import ExternalTask
from service import ordering
from service.claims import lock_task
from service.dispatch import requeue
from service.errors import ServiceError
from service.incidents import IncidentKind, open_incident, resolve_open
from service.outbox_rows import add_event
from service.transitions import move, settle_retry

INCIDENT_FOR_KIND = {
    OutboxKind.SUBMIT: IncidentKind.SUBMIT_FAILED,
    OutboxKind.RELAY: IncidentKind.RELAY_FAILED,
    OutboxKind.CHANNEL: IncidentKind.RELAY_FAILED,  # the same failure: the domain app was not told
    OutboxKind.CANCEL: IncidentKind.CANCEL_FAILED,
    OutboxKind.NOTIFY: IncidentKind.NOTIFICATION_FAILED,
    # a probe that never finished: the escalation it stood for did not happen either
    OutboxKind.PROBE: IncidentKind.DEADLINE_EXCEEDED,
    # a status check (a confirm hint's, a poll) that never finished: the next one asks again
    OutboxKind.CHECK: IncidentKind.BATCH_ROW_FAILED,
}
PARKED_ENDPOINT_GONE = ParkedReason.ENDPOINT_GONE.value


class NotReplayable(ServiceError):
    """The dead letter is closed already, or what it would redo no longer exists (→ 409)."""


def dead_letter(
    session: Session,
    outbox: OutboxMessage,
    error: str,
    fault: str,
    now: datetime,
    *,
    poison: bool = False,
    answer: str | None = None,
) -> list[OutboxMessage]:
    """A DeadLetter and (but for the caller's fault) an Incident in the same transaction as the
    task's state change. ``answer``: what the refusing side said with its status, bounded and
    redacted (``core.errors.CallError.answer``), kept with the letter for the operator.

    A letter of the caller's fault (the vendor refused what the caller gave, or the caller's own
    endpoint refused its callback: ``core.classify.fault_of``) opens no incident: nothing of ours
    is broken, the caller hears of it (its task fails), and replaying it unchanged is refused again.
    The dead-letter list (``fault=caller``) and the overview's count are where they are seen; one
    incident each made every caller 422 page someone.

    A submission that fails for good fails the task, and the domain app hears of it as
    ``task.completed`` / ``failed`` (the outcome names the dead letter, which can be replayed) --
    unless the task is ``cancel_requested``: its submit was settling whether the vendor holds a job
    to cancel, and the task waits, counted against its vendor's capacity, for the replay.
    A poison message is dead-lettered without an attempt having been made.
    """
    if poison:  # no attempt was made
        store_of(session).outbox.finish_unattempted(outbox, now)
    else:
        store_of(session).outbox.finish(outbox, now)
    task = lock_task(session, outbox.task_id) if outbox.task_id is not None else None
    ordering.settled(session, outbox, now, gap="dead_lettered")
    if not poison and task is not None and outbox.kind == OutboxKind.SUBMIT:
        task.attempts += 1
    letter = DeadLetter(
        kind=POISON if poison else outbox.kind,
        message_id=outbox.message_id,
        outbox_id=outbox.id,
        correlation_id=outbox.correlation_id,
        provider=task.provider if task else None,
        payload={"outbox_kind": outbox.kind, **outbox.payload},
        error=error,
        answer=answer,
        fault=fault,
        attempts=outbox.attempts,
        first_failed_at=outbox.created_at,
        last_failed_at=now,
    )
    session.add(letter)
    session.flush()
    # A notice that cannot be sent is never itself notified (core.notifications.NOT_NOTIFIED), even as poison.
    poisoned = poison and outbox.kind != OutboxKind.NOTIFY
    kind = IncidentKind.POISON_MESSAGE if poisoned else INCIDENT_FOR_KIND[outbox.kind]
    if poisoned or fault != Fault.CALLER:
        open_incident(
            session,
            kind,
            f"outbox:{outbox.id}",
            f"dead letter {letter.id} ({fault}): {error}",
            now,
            correlation_id=outbox.correlation_id,
        )
    if task is None:
        return []
    settle_retry(session, task, outbox)
    task.last_error = error
    add_event(session, task, f"{outbox.kind}.dead_lettered", now, error=error, fault=fault, dead_letter_id=letter.id)
    if outbox.kind == OutboxKind.SUBMIT and task.state == State.CANCEL_REQUESTED:
        # Canceled while the vendor had not answered, and the vendor could not be asked whether it
        # holds a job (service.lifecycle.request_cancel): the task stays cancel_requested, keeping
        # its vendor slot, and the incident names it. A replay asks ``find`` again.
        return []
    if outbox.kind == OutboxKind.SUBMIT and task.state not in TERMINAL:
        task.outcome = {"error": error, "fault": fault, "dead_letter_id": letter.id}
        return move(session, task, State.FAILED, now, reason="submission failed")
    return []


def count_delivery(
    session: Session, row: OutboxMessage, max_deliveries: int, now: datetime, *, counted: bool = False
) -> bool:
    """Count one more start of this (locked, not done) message; False once it must not run.
    ``counted``: the claim counted it already (``service.claims.start_delivery``).

    ``deliveries`` goes back to 0 whenever a delivery ends normally, so it counts only starts that
    never finished — a message that kills its worker every time. Past the limit it is dead-lettered
    without running. The caller commits the count before the message's call is made.
    """
    if not counted:
        store_of(session).outbox.count_delivery(row)
    if row.deliveries <= max_deliveries:
        return True
    error = f"started {row.deliveries - 1} times without finishing (worker lost each time)"
    dead_letter(session, row, error, Fault.SYSTEM, now, poison=True)
    return False


def _by(by: str | None) -> dict[str, str]:
    """The operator, on the task's timeline, when an operator did it."""
    return {"by": by} if by else {}


def replay(session: Session, letter: DeadLetter, now: datetime, by: str | None = None) -> list[OutboxMessage]:
    """Re-drive a dead letter with its original message id (the vendor sees the same Idempotency-Key,
    the domain app the same webhook-id). A task that its submission failed is reopened, and its
    submission queued in fair dispatch (``service.dispatch.requeue``). Returns the rows published
    at commit (none for a submission that waits for its turn)."""
    if letter.state != "open":
        raise NotReplayable(f"dead letter {letter.id} is {letter.state}")
    row = session.get(OutboxMessage, letter.outbox_id) if letter.outbox_id is not None else None
    if row is None:
        raise NotReplayable(f"dead letter {letter.id} has no outbox message to re-drive (poison from the broker)")
    letter.state, letter.closed_at = "replayed", now
    letter.replay_count += 1
    store_of(session).outbox.replay(row, now)  # a new row again, its retry budget starting now
    reopened: ExternalTask | None = None
    if row.task_id is not None:
        task = lock_task(session, row.task_id)
        add_event(session, task, f"{row.kind}.replayed", now, dead_letter_id=letter.id, **_by(by))
        if row.kind == OutboxKind.SUBMIT and task.state == State.FAILED:
            previous, task.state = task.state, reopen(task.state).value
            task.outcome, task.updated_at = None, now
            add_event(session, task, "state.requested", now, previous=previous, reason="dead letter replayed")
            reopened = task
    kind = IncidentKind.POISON_MESSAGE if letter.kind == POISON else INCIDENT_FOR_KIND.get(row.kind, "")
    resolve_open(session, kind, f"outbox:{row.id}", now, f"dead letter {letter.id} replayed")
    # A reopened submission waits in fair dispatch like a new one (its vendor's MAX_IN_FLIGHT, its
    # client's window, its concurrency key): released now if they have room, else when they do.
    # Last, because the release takes the dispatch lock.
    if reopened is not None and requeue(session, reopened, row, now):
        return [row] if row.parked_reason is None else []
    publish_after_commit(session, [row])
    return [row]


def discard(session: Session, letter: DeadLetter, now: datetime, by: str | None = None) -> None:
    """Close without redoing: a person looked and decided, so its incident is resolved too."""
    if letter.state != "open":
        raise NotReplayable(f"dead letter {letter.id} is {letter.state}")
    letter.state, letter.closed_at = "discarded", now
    row = session.get(OutboxMessage, letter.outbox_id) if letter.outbox_id is not None else None
    if row is not None and row.task_id is not None:
        task = lock_task(session, row.task_id)
        add_event(session, task, f"{row.kind}.discarded", now, dead_letter_id=letter.id, **_by(by))
    kind = IncidentKind.POISON_MESSAGE if letter.kind == POISON else INCIDENT_FOR_KIND.get(letter.kind, "")
    subject = f"outbox:{letter.outbox_id}" if letter.outbox_id is not None else f"message:{letter.message_id}"
    resolve_open(session, kind, subject, now, f"dead letter {letter.id} discarded")


def dead_letter_message(
    session: Session, message_id: str, payload: dict[str, Any], error: str, now: datetime
) -> DeadLetter:
    """A broker message we cannot even decode or route: kept, never dropped. The incident names the
    id as stored (at most 64 characters), the one :func:`discard` resolves it by."""
    kept = message_id[:64]
    letter = DeadLetter(
        kind=POISON,
        message_id=kept,
        payload=payload,
        error=error,
        fault=Fault.SYSTEM,
        attempts=0,
        first_failed_at=now,
        last_failed_at=now,
    )
    session.add(letter)
    session.flush()
    open_incident(session, IncidentKind.POISON_MESSAGE, f"message:{kept}", f"dead letter {letter.id}: {error}", now)
    return letter


# --- Callback endpoints that answered 410 Gone ---
#
# Keyed by (client, URL): a 410 from one tenant's endpoint pauses only that tenant's relays to it,
# even when another tenant uses the very same URL. ``url_hash`` is the whole URL's (two URLs that
# differ only in their query are two endpoints); what is stored and shown is its stripped form.


def url_hash(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def _endpoint(session: Session, client_id: int, url: str) -> CallbackEndpoint | None:
    return store_of(session).attention.endpoint(session, client_id, url_hash(url))


def _incident_subject(client_id: int) -> str:
    """One open incident per client for all its disabled endpoints, however many URLs answer 410:
    the unique ``open_key`` makes it so (``service.incidents.open_incident``). A tenant whose app
    answers 410 to a thousand distinct URLs raises one incident and one notice, not a thousand."""
    return f"endpoints:{client_id}"


def _legacy_incident_subject(client_id: int, hashed: str) -> str:
    """Before one incident per client, one per URL: resolved with its URL's endpoint."""
    return f"endpoint:{client_id}:{hashed}"


def _disabled_count(session: Session, client_id: int) -> int:
    return store_of(session).attention.disabled_count(session, client_id)


def endpoint_disabled(session: Session, client_id: int, url: str) -> bool:
    endpoint = _endpoint(session, client_id, url)
    return endpoint is not None and endpoint.disabled_at is not None


def park(session: Session, outbox: OutboxMessage, url: str, now: datetime) -> None:
    """The relay waits for its endpoint to be re-enabled; the sweep leaves it alone."""
    store_of(session).outbox.park(outbox, strip_url(url))
    ordering.settled(session, outbox, now, gap="callback endpoint disabled")
    if outbox.task_id is not None:
        task = lock_task(session, outbox.task_id)
        settle_retry(session, task, outbox)
        add_event(session, task, "relay.parked", now, reason="callback endpoint disabled (410 Gone)")


def disable_endpoint(session: Session, client_id: int, url: str, reason: str, now: datetime) -> None:
    """Disable the client's URL (one row per URL) and keep the client's one open incident about its
    disabled endpoints current: opened with the first, its detail counting them after."""
    endpoint = _endpoint(session, client_id, url)
    if endpoint is None:
        endpoint = CallbackEndpoint(client_id=client_id, url_hash=url_hash(url), url=strip_url(url))
        session.add(endpoint)
    endpoint.disabled_at, endpoint.disabled_reason = now, reason
    client = session.get(Client, client_id)
    disabled = _disabled_count(session, client_id)
    name = client.name if client else client_id
    open_incident(
        session,
        IncidentKind.ENDPOINT_DISABLED,
        _incident_subject(client_id),
        f"relays of client {name} to {disabled} disabled callback URL(s) are paused;"
        f" the latest, {strip_url(url)}: {reason}",
        now,
    )


def enable_endpoint(session: Session, client_id: int, url: str, now: datetime) -> list[OutboxMessage]:
    """Re-enable the client's endpoint and hand back its parked relays, to publish after commit.

    ``url`` may be the whole URL or the stripped form operators see: every disabled endpoint of the
    client with that stripped form is enabled. Relays parked on them are released; one whose own
    URL is still disabled (a sibling that differs only in its query) simply parks again.
    """
    shown = strip_url(url)
    endpoints = store_of(session).attention.disabled_endpoints(session, client_id, shown)
    if not endpoints:
        raise NotReplayable("that callback endpoint is not disabled")
    for endpoint in endpoints:
        endpoint.disabled_at, endpoint.enabled_at = None, now
        resolve_open(
            session,
            IncidentKind.ENDPOINT_DISABLED,
            _legacy_incident_subject(client_id, endpoint.url_hash),
            now,
            "endpoint re-enabled",
        )
    if _disabled_count(session, client_id) == 0:  # the client's incident stays open while any is disabled
        resolve_open(session, IncidentKind.ENDPOINT_DISABLED, _incident_subject(client_id), now, "endpoints re-enabled")
    rows = store_of(session).attention.parked_relays(session, client_id, shown)
    for row in rows:
        store_of(session).outbox.unpark(row)
    publish_after_commit(session, rows)
    return list(rows)
