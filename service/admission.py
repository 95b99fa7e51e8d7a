"""Fair dispatch at submit (issue 20): the client's load, read under the dispatch lock, and the
decision it leads to — the new task goes to the broker at once, or waits in the database with its
reason. Releasing what waits is ``service.dispatch``.

- **The load** (:func:`load`, before the task is inserted): the client's tasks on their way to the
  vendor (its window), waiting in its queue and, when its ``max_open_tasks`` cap is counted, every
  open task of its, in one scan of its open tasks, after the dispatch lock on PostgreSQL.
- **The decision** (:func:`admit`, in the submit's transaction): room → the task is released at
  once and its ``submit`` row published at commit as before; none → the task is *queued*
  (``dispatched_at`` null, the row parked ``queued``: neither the publish hook nor the sweep
  touches it) with the reason furthest from the client's own hands: a vendor at capacity, then the
  task's concurrency key, then the client's own earlier work.

A session without the policy (``service.dispatch.install``) releases every task at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from core.fair_share import CLIENT_BACKLOG, CONCURRENCY_KEY, VENDOR_CAPACITY, DispatchPolicy, rank
from foundation import metrics
from models.client import Client
from models.store import store_of
from models.task import ExternalTask
from service.dispatch import lock_releases, policy_of, release_lock_key


@dataclass(frozen=True)
class Load:
    """What one client has for one provider, read under the dispatch lock: its tasks on their way
    to the vendor (its window) and waiting in its queue, and, when asked, every open task of its
    (its ``max_open_tasks`` cap, counted by the submit under the client's row lock)."""

    on_the_way: int = 0
    waiting: int = 0
    open_tasks: int = 0


def load(session: Session, provider: str, client_id: int, *, count_open: bool) -> Load:
    """The client's :class:`Load`, before a new task of ``provider`` is inserted: its locks
    (:func:`_lock`), then one statement (the cap's count and the window's in one scan of the
    client's open tasks: ``models.store.admission``), which :func:`admit` then decides under."""
    policy = policy_of(session)
    _lock(session, provider, client_id, policy, lock_client=count_open)
    admission = store_of(session).admission
    if policy is None:
        return Load(open_tasks=admission.count_open(session, client_id)) if count_open else Load()
    if not count_open:
        return Load(*admission.queue_load(session, provider, client_id))
    return Load(*admission.load(session, provider, client_id))


def _lock(session: Session, provider: str, client_id: int, policy: DispatchPolicy | None, *, lock_client: bool) -> None:
    """What the load is read under: the client's row lock when its open tasks are counted against
    its cap (``models.store.admission``: a client's concurrent submits count one after another, so
    the cap is exact), and the dispatch lock when a policy decides (``service.dispatch``), in that
    order and in one statement when both are taken. SQLite's ``BEGIN IMMEDIATE`` serialises writers
    already: its store takes nothing."""
    if not lock_client:
        if policy is not None:
            lock_releases(session, provider, client_id, policy)
        return
    key = None if policy is None else release_lock_key(provider, client_id, policy)
    store_of(session).admission.lock_client(session, client_id, key)


@dataclass(frozen=True)
class Admission:
    """What :func:`admit` decided: ``reason`` None (released) or why the task waits; ``room``: the
    client's window had room all the same (older tasks wait, a release was missed): the caller
    releases the queue's most urgent tasks once the new one is in, the new one perhaps among them."""

    reason: str | None
    room: bool = False


def admit(session: Session, task: ExternalTask, client: Client, now: datetime, found: Load) -> Admission:
    """Before the new task is inserted, with the client's :func:`load`: release it or queue it. The
    caller parks the submit row of a queued task
    (``service.outbox_rows.add_outbox(parked_reason=service.dispatch.QUEUED_ROW)``)."""
    policy = policy_of(session)
    task.dispatch_rank = rank(now, task.priority, policy.aging_s if policy else 60.0)
    if policy is None:
        task.dispatched_at = now
        return Admission(None)
    on_the_way, waiting = found.on_the_way, found.waiting
    # The reason named is the one furthest from the client's own hands: a vendor at capacity, then
    # the task's key, then the client's own earlier work.
    reason = None
    dispatch = store_of(session).dispatch
    if (cap := policy.cap(task.provider)) is not None and dispatch.open_at_vendor(session, task.provider) >= cap:
        reason = VENDOR_CAPACITY
    elif (
        task.concurrency_key is not None
        and dispatch.open_with_key(session, task.provider, client.id, task.concurrency_key)
        >= client.concurrency_key_limit
    ):
        reason = CONCURRENCY_KEY
    elif waiting or on_the_way >= policy.window * max(client.weight, 1):
        reason = CLIENT_BACKLOG
    if reason is None:
        task.dispatched_at = now
        return Admission(None)
    task.wait_reason = reason
    return Admission(reason, room=reason == CLIENT_BACKLOG and on_the_way < policy.window * max(client.weight, 1))


def released(session: Session, task: ExternalTask, client: Client) -> None:
    """The new task :func:`admit` released under a policy is in (not a replay's): it waited for nothing."""
    if policy_of(session) is not None:
        metrics.dispatch_wait(task.provider, client.name, 0.0)
