"""How a consumer takes its outbox row and its task: row locks, re-read under the lock, with the
large columns left unloaded; a relay's row with what its delivery needs to know, in one statement;
the client a channel row goes to. The statements are the store's (``models.store.claims``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from models.client import Client
from models.messages import OutboxMessage
from models.store import store_of
from models.store.claims import RelayRow
from models.task import ExternalTask
from service import dispatch
from service.ordering import held_by
from wire.bounded_json import JsonLimits, check_bounds, strict_loads

# Tasks load without the caller's ``input`` (read only by the submit, through a guarded loader) and,
# where noted, without the vendor's ``outcome`` (``models.store.outbox.WITHOUT_INPUT``,
# ``WITHOUT_PAYLOAD``): both can be large, and rows stored before their limits existed can be too
# deep to decode. A deferred column loads on first access.


def claim_outbox(session: Session, outbox_id: int) -> OutboxMessage | None:
    """Lock an outbox row for its consumer; None when it is gone or already done (idempotency)."""
    return store_of(session).claims.claim_outbox(session, outbox_id)


def claim_outbox_and_task(
    session: Session, outbox_id: int, *, with_input: bool = False, job: tuple[str, str] | None = None
) -> tuple[OutboxMessage, ExternalTask, str | None] | None:
    """:func:`claim_outbox` and :func:`lock_task` of its task in one statement (and the task's input
    as JSON text, for a submission: parse it with :func:`parse_stored_input`). Both rows are taken
    ``FOR NO KEY UPDATE``: consumers of one outbox row still exclude each other, and the task's
    writers each other, while inserts that merely reference either do not wait.

    ``job`` (source, vendor job id), a submission's record, which sets the job id: on PostgreSQL
    the statement takes that job's lock too (:func:`lock_job`), before the row locks, as a webhook
    that found no task for it takes it before it looks again; and it looks whether tasks are queued
    behind this one (``service.dispatch.queued_behind``, noted for the release its move makes).
    Three round trips in one.
    """
    job_key = scope = None
    if job is not None:
        job_key = job_lock_key(*job)
        scope = dispatch.queued_scope(session, job[0])
    found = store_of(session).claims.claim_outbox_and_task(session, outbox_id, with_input, job_key, scope)
    if found is None:
        return None
    claimed, queued = found
    if scope is not None and queued is not None:
        dispatch.note_queued(session, claimed[1], scope, queued)
    return claimed


def start_delivery(
    session: Session, outbox_id: int, *, with_input: bool = False, lease_until: datetime | None = None
) -> tuple[OutboxMessage, ExternalTask, str | None] | None:
    """:func:`claim_outbox_and_task` for a delivery's start, with the delivery counted
    (``deliveries + 1``, the poison guard: ``service.dead_letters.count_delivery(counted=True)``
    then only checks it) and its start lease set to ``lease_until`` (``service.start_leases``):
    the store's ``start_delivery`` (on PostgreSQL the claiming statement itself, an ``UPDATE …
    RETURNING`` whose row the task is locked and read with; elsewhere the flush writes them). A
    start that rolls back (its call must wait) takes both back with it."""
    return store_of(session).outbox.start_delivery(session, outbox_id, with_input, lease_until)


def job_lock_key(source: str, job_id: str) -> int:
    """The advisory lock key of one vendor job (:func:`lock_job`)."""
    digest = hashlib.blake2b(f"{source}\0{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_job(session: Session, source: str, job_id: str) -> bool:
    """Serialise "is there a task for this vendor job?" against "this task now has that job id".

    Without it, on PostgreSQL a webhook that overtakes its submit response can look for the task
    before the submission commits while the submission looks for orphans before the webhook
    commits: neither sees the other and the event stays an orphan. Both take this transaction-level
    advisory lock before they look, and before any row lock of the task (the submission in its
    claim: :func:`claim_outbox_and_task` with ``job``; the webhook when its first look found no
    task, before it looks again: a row it could wait on does not match yet), so the two never wait
    on each other crosswise. SQLite's ``BEGIN IMMEDIATE`` serialises writers already: False there,
    nothing taken, and a first look is the last word.
    """
    return store_of(session).locks.lock(session, job_lock_key(source, job_id))


def lock_task(session: Session, task_id: int) -> ExternalTask:
    """Events for one task apply serially: every writer takes the task's row lock first
    (``FOR NO KEY UPDATE``: writers exclude each other; inserts that merely reference the task don't wait).
    The row is re-read under the lock, even if this session loaded it before."""
    return store_of(session).claims.lock_task(session, task_id)


def parse_stored_input(raw: str, limits: JsonLimits) -> Any:
    """Rows stored before the limits existed may hold an input too deep for any JSON decoder
    (RecursionError wherever it is loaded): read as text, its depth is measured before parsing,
    and it is refused with TooDeep or TooLarge (both InvalidJson) instead.
    """
    value = strict_loads(raw, max_depth=limits.max_depth, what="the stored input")
    check_bounds(value, limits, "the stored input")
    return value


def claim_finished(session: Session, outbox_id: int, now: datetime) -> OutboxMessage | None:
    """:func:`claim_outbox` for a delivery that is done whatever it finds (a relay's record): the row
    locked and finished in one ``UPDATE … RETURNING``, None once it is done. :func:`finished` then
    records what that causes, in the same transaction."""
    return store_of(session).outbox.claim_finished(session, outbox_id, now)


def finish_delivered(
    session: Session, outbox_id: int, now: datetime, event: tuple[str, dict[str, Any]], slots: list[str], holder: str
) -> OutboxMessage | None:
    """A delivered relay's record (the store's ``finish_delivered``; on PostgreSQL one statement, a
    data-modifying ``WITH``): what :func:`claim_finished` does, the timeline ``event`` (kind, detail)
    that ``service.transitions.finished`` would write next (pass it ``event_written=True``), and the
    relay's ``slots`` given back (``models.store.slots.give_back``: they go whether or not the row was
    still open). Three round trips in one for every callback on PostgreSQL."""
    return store_of(session).outbox.finish_delivered(session, outbox_id, now, event, slots, holder)


def take_relay_slots(
    session: Session,
    row: OutboxMessage,
    groups: list[tuple[str, int]],
    holder: str,
    now: datetime,
    ttl_s: float,
    target: str,
    first: list[int] | None = None,
    lease_until: datetime | None = None,
) -> tuple[list[str] | None, bool]:
    """A relay's slots (the store's ``slots.take``) and whether its delivery was counted with them.

    On PostgreSQL, when the first try finds both of its two slots free (the usual case), the same
    statement counts the delivery (``deliveries + 1``, the poison guard) and writes the row's
    ``target`` and start lease (``lease_until``: ``service.start_leases``): the store's
    ``slots.take_for_delivery``. Otherwise (a slot held, one group, SQLite) the caller counts as
    before: ``service.dead_letters.count_delivery``. ``first``: each group's first slot tried (tests)."""
    return store_of(session).slots.take_for_delivery(
        session, row, groups, holder, now, ttl_s, target, lease_until, first
    )


#: what :func:`claim_relay` answers: the store's row (``models.store.claims.RelayRow``), under the
#: name the service's callers know
RelayClaim = RelayRow


def claim_relay(session: Session, outbox_id: int) -> RelayClaim | None:
    """The relay's start in one statement, one result row: the row locked and everything
    :class:`RelayClaim` holds. Whether the client has a disabled or a failing endpoint is an
    ``EXISTS`` each, so the row stays one however many of either a client has: the relay then looks
    up its own URL's and origin's row (:func:`disabled_endpoint`, ``models.store.endpoint_health``'s ``find``),
    one row at most each, only when there is any. (Joined instead, a client's disabled URLs times its
    failing ones came back with every start: 410 × 410 made 168,100 rows.) The task's payload is not
    read: the outbox row carries the callback's body. None when the row is gone or already done."""
    return store_of(session).claims.claim_relay(session, outbox_id, held_by)


def disabled_endpoint(session: Session, client_id: int, hashed_url: str) -> bool:
    """Is the client's callback URL (its ``url_hash``) disabled? One row of the unique key at most."""
    return store_of(session).claims.disabled_endpoint(session, client_id, hashed_url)


def channel_client(session: Session, row: OutboxMessage) -> tuple[Client | None, str | None]:
    """The client a channel row goes to -- its task's, or the one a rejection names (it has no
    task) -- and the task's traceparent (core.trace_context), read with it: the event continues it."""
    if row.task_id is not None:
        return store_of(session).claims.client_of_task(session, row.task_id)
    return session.get(Client, row.payload.get("client_id")), None
