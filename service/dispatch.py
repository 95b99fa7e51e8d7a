"""Fair dispatch (issue 20): a submitted task goes to the broker only when its client, its vendor
and its concurrency key have room; otherwise it waits here, in the database, and is released when
room frees — in the order ``core.fair_share`` rules (priority with aging within a client, weighted
fairness across clients for a vendor's capacity).

- **At submit** (``service.admission``, in the submit's transaction): room → the task is released
  at once; none → it is *queued* (``dispatched_at`` null, its submit row parked ``queued``).
- **When room frees** (:func:`moved`, called by ``service.transitions.move`` in the transaction of the state
  change): a task reaching the vendor frees a place in its client's window; one becoming final frees
  the vendor's capacity and its concurrency key. The next queued tasks are released there and then:
  ``dispatched_at`` set, their rows un-parked and published after commit.
- **Nothing is left behind**: beat's ``liaison.dispatch`` runs the same release every few seconds
  for every provider and client with queued tasks, so a release missed by a race or a crash costs
  seconds, not work.

Releases of one provider are serialised by a transaction-level advisory lock on PostgreSQL
(SQLite serialises writers already): per provider when it has a capacity (every client shares it),
otherwise per provider and client (only the client's window is at stake). A writer that holds a
task's row lock may then take the dispatch lock; a dispatch-lock holder never waits on a task
(``SKIP LOCKED``), so the two never wait on each other crosswise.

The policy is installed once on the sessionmaker (:func:`install`, by the composition roots, like
the publish hook); a session without it releases every task at once, as before issue 20.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from itertools import zip_longest

from sqlalchemy import (
    ColumnElement,
)
from sqlalchemy.orm import Session, sessionmaker

from core.fair_share import (
    CLIENT_BACKLOG,
    CONCURRENCY_KEY,
    VENDOR_CAPACITY,
    Candidate,
    DispatchPolicy,
    fill,
    first_free,
    rank,
)
from core.outbox_states import ParkedReason
from core.states import TERMINAL, State
from foundation import metrics
from models.messages import OutboxMessage
from models.publishing import publish_after_commit
from models.store import store_of
from models.store.dispatch import queued_behind as store_queued_behind
from models.task import ExternalTask

POLICY = "liaison.dispatch_policy"
#: the ``parked_reason`` of a queued task's submit row
QUEUED_ROW = ParkedReason.QUEUED.value
#: At most this many tasks released by one call (a beat run calls again while it releases any).
BATCH = 200


def install(maker: sessionmaker[Session], policy: DispatchPolicy) -> None:
    """Every session of ``maker`` dispatches by ``policy`` (called once, by the composition root)."""
    maker.configure(info={**maker.kw.get("info", {}), POLICY: policy})


def policy_of(session: Session) -> DispatchPolicy | None:
    return session.info.get(POLICY)


def lock_releases(session: Session, provider: str, client_id: int | None, policy: DispatchPolicy) -> None:
    """Take the dispatch lock of ``provider`` (and of ``client_id`` when the provider has no capacity)
    for the rest of the transaction: what releases, and what a submit decides, happen one at a time."""
    store_of(session).locks.lock(session, release_lock_key(provider, client_id, policy))  # SQLite: none needed


def release_lock_key(provider: str, client_id: int | None, policy: DispatchPolicy) -> int:
    """The advisory lock key :func:`lock_releases` takes (the submit takes it in a statement of its own)."""
    name = f"dispatch\0{provider}" if policy.cap(provider) is not None else f"dispatch\0{provider}\0{client_id}"
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def moved(session: Session, task: ExternalTask, previous: str, target: State, now: datetime) -> None:
    """``service.transitions.move`` changed the task's state: release what that made room for."""
    policy = policy_of(session)
    if policy is None or (previous != State.REQUESTED and target not in TERMINAL):
        return
    if task.dispatched_at is None:
        if previous == State.REQUESTED:
            # Left the queue without going to the vendor (canceled, failed by a deadline): its row
            # runs once to end itself (the submit finds the task no longer requested).
            _release_rows(session, [task.id])
        return
    if previous == State.REQUESTED or policy.cap(task.provider) is not None or task.concurrency_key is not None:
        release(session, task.provider, task.client_id, now)


def release(session: Session, provider: str, client_id: int | None, now: datetime) -> int:
    """Release queued tasks of ``provider`` that now have room: the client's (its window), or, for
    a provider with a capacity, every client's in turn. Returns how many were released."""
    return len(_release(session, provider, client_id, now))


def _release(session: Session, provider: str, client_id: int | None, now: datetime) -> list[int]:
    """:func:`release`, naming the tasks it released (in the order they were published)."""
    policy = policy_of(session)
    if policy is None:
        return []
    cap = policy.cap(provider)
    store = store_of(session)
    queued = _noted(session, provider, client_id if cap is None else None)
    if queued is None:
        queued = store.dispatch.anything_queued(session, provider, client_id if cap is None else None)
    if not queued:  # usually nothing waits: no lock taken
        return []
    lock_releases(session, provider, client_id, policy)
    room: int | None = None
    if cap is not None:
        room = min(BATCH, cap - store.dispatch.open_at_vendor(session, provider))
        if room <= 0:
            return []
    found = store.dispatch.clients_waiting(session, provider, client_id if cap is None else None)
    names = {row.client_id: row.name for row in found}
    limits = {row.client_id: row.concurrency_key_limit for row in found}
    candidates = [
        Candidate(row.client_id, row.weight, row.open_jobs, row.on_the_way, row.waiting, row.first_rank)
        for row in found
    ]
    found_ids: dict[int, list[int]] = {}

    def take(client_id: int, wanted: int) -> int:
        found_ids[client_id] = _next_tasks(session, provider, client_id, min(wanted, BATCH), limits[client_id])
        return len(found_ids[client_id])

    # a client whose queued tasks are all held by their keys hands the slots it cannot use on
    granted = fill(candidates, room, policy.window, take)
    picked = {
        c.client_id: found_ids[c.client_id][: granted[c.client_id]] for c in candidates if granted[c.client_id] > 0
    }
    # published in turns (one of each client, then the next of each), so that the broker, too,
    # hands them to the workers in round-robin order
    order = [task_id for turn in zip_longest(*picked.values()) for task_id in turn if task_id is not None]
    owner = {task_id: cid for cid, ids in picked.items() for task_id in ids}
    return _mark_released(session, order, provider, {t: names[owner[t]] for t in order}, now)


def requeue(session: Session, task: ExternalTask, row: OutboxMessage, now: datetime) -> bool:
    """A reopened submission (a replayed dead letter: ``service.dead_letters.replay``) waits in fair
    dispatch like a new one: no longer counted as released (its first release is spent), ranked at
    the replay with its priority, its submit row parked ``queued``, and released at once if its
    vendor's capacity, its client's window and its concurrency key have room — else it waits, with
    its reason, for the release their room frees. So replaying dead letters in bulk never takes a
    vendor past ``MAX_IN_FLIGHT`` nor a key past its limit. False without a policy: the caller
    publishes the row itself, as before fair dispatch.

    The caller holds the task's row lock and takes no other after this (the release takes the
    dispatch lock: a dispatch-lock holder never waits on a task)."""
    policy = policy_of(session)
    if policy is None:
        return False
    task.dispatched_at = None
    task.dispatch_rank = rank(now, task.priority, policy.aging_s)
    store_of(session).outbox.queue(row)
    session.flush()
    if task.id in _release(session, task.provider, task.client_id, now):
        session.expire(task, ["dispatched_at", "wait_reason"])  # the release wrote them in SQL
        return True
    task.wait_reason = _wait_reason(session, task, policy)
    store_of(session).timeline.add(
        session, task.id, "submit.queued", now, {"reason": task.wait_reason, "priority": task.priority}
    )
    return True


def _wait_reason(session: Session, task: ExternalTask, policy: DispatchPolicy) -> str:
    """Why a queued task was not released, named as a submit names it (``service.admission``): a
    vendor at capacity, then its concurrency key, then its client's own earlier work."""
    cap = policy.cap(task.provider)
    dispatch = store_of(session).dispatch
    if cap is not None and dispatch.open_at_vendor(session, task.provider) >= cap:
        return VENDOR_CAPACITY
    if task.concurrency_key is not None:
        limit = dispatch.key_limit(session, task.client_id)
        if dispatch.open_with_key(session, task.provider, task.client_id, task.concurrency_key) >= limit:
            return CONCURRENCY_KEY
    return CLIENT_BACKLOG


def queued_pairs(session: Session) -> list[tuple[str, int]]:
    """(provider, client) of every queue that holds tasks: what beat's ``liaison.dispatch`` visits."""
    return store_of(session).dispatch.queues(session)


# --- the steps ---------------------------------------------------------------------------------


def _next_tasks(session: Session, provider: str, client_id: int, wanted: int, key_limit: int) -> list[int]:
    """The client's first ``wanted`` queued tasks in rank order that their concurrency key lets go,
    however many tasks held back by their keys stand before them; a task another transaction holds
    (being canceled) is skipped.

    The query passes over the keys already at their limit at the vendor (:func:`_eligible`), so a
    long run of one blocked key costs a scan, not the client's other tasks their turn. A key that
    this very selection fills (its first task taken, the rest of its run on the page) is passed over
    on the next page, which starts after the last task seen: pages stop when ``wanted`` are taken
    or the queue is exhausted, and each page but the last fills a key or takes a task, so there are
    at most ``wanted`` + 1 of them (usually one)."""
    taken: list[int] = []
    counts: dict[str, int] = {}  # a key's open jobs and what this selection took of it
    after: tuple[datetime, int] | None = None
    while len(taken) < wanted:
        page_size = (wanted - len(taken)) * 4 + 16
        full = sorted(key for key, n in counts.items() if n >= key_limit)
        rows = store_of(session).dispatch.eligible(session, provider, client_id, key_limit, page_size, full, after)
        for _, key, _, open_now in rows:
            if key is not None:
                counts.setdefault(key, open_now)
        ranked = [(task_id, key) for task_id, key, _, _ in rows]
        more = first_free(ranked, counts, key_limit, wanted - len(taken))
        chosen = set(more)
        for task_id, key in ranked:
            if key is not None and task_id in chosen:
                counts[key] += 1
        taken.extend(more)
        if len(rows) < page_size:
            break
        after = (rows[-1][2], rows[-1][0])
    return taken


def _mark_released(
    session: Session, ids: list[int], provider: str, clients: dict[int, str], now: datetime
) -> list[int]:
    """Release those of ``ids`` still queued; returns them, in ``ids``' order."""
    if not ids:
        return []
    released = store_of(session).dispatch.release(session, ids, now)  # those still queued
    for task_id, created_at, priority in released:
        store_of(session).timeline.add(session, task_id, "submit.released", now, {"priority": priority})
        metrics.dispatch_wait(provider, clients[task_id], max((now - created_at).total_seconds(), 0.0))
    still = {task_id for task_id, _, _ in released}
    done = [task_id for task_id in ids if task_id in still]
    _release_rows(session, done)
    return done


def _release_rows(session: Session, task_ids: list[int]) -> None:
    """Un-park the tasks' queued submit rows and publish them after commit, in ``task_ids``' order:
    one UPDATE … RETURNING the rows it changed (what the publisher needs), no SELECT before it."""
    if not task_ids:
        return
    rows = store_of(session).outbox.release_queued(session, task_ids)
    place = {task_id: n for n, task_id in enumerate(task_ids)}
    publish_after_commit(session, sorted(rows, key=lambda row: place.get(row.task_id or 0, 0)))


def queued_scope(session: Session, provider: str) -> bool | None:
    """Which queued tasks a release for ``provider`` would look for: its client's (True), every
    client's (False: the provider has a capacity), or none (None: no policy, nothing is queued)."""
    policy = policy_of(session)
    return None if policy is None else policy.cap(provider) is None


def queued_behind(one_client: bool) -> ColumnElement[bool]:
    """:func:`release`'s first look ("does anything wait?") as a column of a statement that reads
    the task whose move may release them (``service.claims``): the store's
    (``models.store.dispatch.queued_behind``). Read before the move rather than after it, the look
    can miss a task queued in between, as it could miss one queued before the commit: beat's
    ``liaison.dispatch`` releases it seconds later (the module's "nothing is left behind")."""
    return store_queued_behind(one_client)


def note_queued(session: Session, task: ExternalTask, one_client: bool, queued: bool) -> None:
    """What :func:`queued_behind` found for ``task``: the release its move makes in this transaction
    takes it as its first look."""
    key = (task.provider, task.client_id if one_client else None)
    session.info[_NOTED] = (session.get_transaction(), {key: queued})


def _noted(session: Session, provider: str, client_id: int | None) -> bool | None:
    """The look :func:`note_queued` kept for this transaction (used once), or None."""
    noted = session.info.pop(_NOTED, None)
    if noted is None or noted[0] is not session.get_transaction():
        return None
    return noted[1].get((provider, client_id))


_NOTED = "liaison.queued_noted"
