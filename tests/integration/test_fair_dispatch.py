"""Fair dispatch end to end (service.dispatch), both databases and both brokers: a client's backlog
waits in the database, so another client's task (or the same client's urgent one) reaches the vendor
behind at most a window of it, and a concurrency key is never passed, as the vendor itself counts it
(the simulator's job times). The vendor's capacity: test_vendor_capacity.py.

Orders and counts, not wall-clock gaps: where a task reached the vendor among the others."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from foundation.settings import Settings
from models.task import ExternalTask, TaskEvent
from tests.integration.conftest import PAIRS, _stack
from tests.integration.dispatch_support import (
    HELD,
    UNPACED,
    all_final,
    most_open_at_once,
    new_client,
    submit,
    vendor_jobs,
    wait,
)
from tests.integration.stack import Stack
from tests.support.servers import ServerThread

WINDOW = Settings.from_env({}).dispatch_window  # the shipped window


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def dispatch_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=UNPACED)


def _at_vendor_before_release(stack: Stack, jobs: list[dict], cid: str) -> int:
    """How many of ``jobs`` the vendor had created when ``cid`` was released to the broker: those
    were out of the queue already; what stood ahead of ``cid`` in it is at most a window more."""
    with stack.db.transaction() as session:
        released = session.scalar(select(ExternalTask.dispatched_at).where(ExternalTask.correlation_id == cid))
    assert released is not None
    return sum(job["created_at"] < released.timestamp() for job in jobs if job["task"] != cid)


def _queued(stack: Stack, ids: list[str]) -> int:
    with stack.db.transaction() as session:
        return (
            session.scalar(
                select(func.count(func.distinct(TaskEvent.task_id)))
                .join(ExternalTask, ExternalTask.id == TaskEvent.task_id)
                .where(ExternalTask.correlation_id.in_(ids), TaskEvent.kind == "submit.queued")
            )
            or 0
        )


@pytest.mark.timeout(240)
def test_a_clients_backlog_never_stands_in_front_of_another_clients_task(dispatch_stack: Stack) -> None:
    stack = dispatch_stack
    key_a, key_b = new_client(stack), new_client(stack)
    tag = uuid.uuid4().hex[:6]
    backlog = [f"backlog-{tag}-{i}" for i in range(40)]
    b_task = f"other-{tag}"
    submit(stack, key_a, backlog, simulate=HELD)
    submit(stack, key_b, [b_task])
    wait(all_final(stack, [*backlog, b_task]), "every task finished")

    jobs = vendor_jobs(stack, [*backlog, b_task])
    assert len(jobs) == 41  # one job per task, none twice
    ahead = [job["task"] for job in jobs[: [j["task"] for j in jobs].index(b_task)]]
    queued = _queued(stack, backlog)
    print(f"\n{stack.name}: {queued} of A's 40 waited in the database; B's task reached the vendor after {len(ahead)}")
    assert queued >= 10  # A did hold a backlog when B submitted
    # B waited behind at most A's window (and the four threads' overlap), past what the vendor had
    # already taken when B was released: not behind A's whole backlog
    gone = _at_vendor_before_release(stack, jobs, b_task)
    assert len(ahead) <= gone + WINDOW + 4, (len(ahead), gone)
    assert gone + WINDOW + 4 < len(backlog)  # the bound says something: most of A's were still waiting


@pytest.mark.timeout(240)
def test_a_priority_1_task_overtakes_its_clients_queued_priority_3_work(dispatch_stack: Stack) -> None:
    stack = dispatch_stack
    api_key = new_client(stack)
    tag = uuid.uuid4().hex[:6]
    batch = [f"batch-{tag}-{i}" for i in range(40)]
    urgent = f"urgent-{tag}"
    submit(stack, api_key, batch, simulate=HELD, priority=3)
    submit(stack, api_key, [urgent], priority=1)
    wait(all_final(stack, [*batch, urgent]), "every task finished")
    jobs = vendor_jobs(stack, [*batch, urgent])
    order = [job["task"] for job in jobs]
    print(f"\n{stack.name}: the priority-1 task reached the vendor after {order.index(urgent)} of 40 priority-3 tasks")
    # released at the first room, ahead of every queued priority-3 task: behind the window at most
    gone = _at_vendor_before_release(stack, jobs, urgent)
    assert order.index(urgent) <= gone + WINDOW + 4, (order.index(urgent), gone)
    assert gone + WINDOW + 4 < len(batch)
    assert stack.get(api_key, urgent)["priority"] == 1


@pytest.mark.timeout(240)
def test_a_concurrency_key_keeps_one_job_open_at_a_time(dispatch_stack: Stack) -> None:
    """The vendor holds each keyed job open until the test completes it (no timer), so what is
    asserted does not depend on the machine's speed: while a keyed job is open no other job of the
    key is at the vendor, and the client's key-free tasks reach it meanwhile."""
    stack = dispatch_stack
    api_key = new_client(stack)
    tag = uuid.uuid4().hex[:6]
    keyed = [f"acct-{tag}-{i}" for i in range(4)]
    free = [f"free-{tag}-{i}" for i in range(2)]
    held = {"complete_delay_s": 3600}  # completed by the test, through the simulator's control API
    for cid in keyed:
        submit(stack, api_key, [cid], concurrency_key=f"account-{tag}", simulate=held)
    submit(stack, api_key, free)
    # the client's other tasks do not wait for the key: they finish while its first job is open
    wait(all_final(stack, free), "the key-free tasks finished while the key's first job is open")
    for position, cid in enumerate(keyed):
        (job,) = wait(functools.partial(vendor_jobs, stack, [cid]), f"{cid} at the vendor")
        at_vendor = vendor_jobs(stack, keyed)
        assert [j["task"] for j in at_vendor] == keyed[: position + 1]  # the rest of the key still waits
        assert stack.vendor("POST", f"/_sim/jobs/{job['job_id']}/complete", json={}).status_code == 200
    wait(all_final(stack, keyed + free), "every task finished")
    jobs = vendor_jobs(stack, keyed)
    assert [j["task"] for j in jobs] == keyed  # in order
    assert most_open_at_once(jobs) == 1
