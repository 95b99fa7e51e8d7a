"""Fair dispatch end to end (models.dispatch), both databases and both brokers: a client's backlog
waits in the database, so another client's task (or the same client's urgent one) reaches the vendor
behind at most a window of it; a vendor's capacity and a concurrency key are never passed, as the
vendor itself counts them (the simulator's job times), also with a second worker that is SIGKILLed.

Orders and counts, not wall-clock gaps: where a task reached the vendor among the others."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bench.procs import Proc, procfile
from bench.stacks import PROCFILE, base_env
from foundation.settings import Settings
from models.client import Client
from models.credentials import authenticate
from models.task import ExternalTask, TaskEvent
from tests.integration import services
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread

WINDOW = Settings.from_env({}).dispatch_window  # the shipped window
CAP = 3
UNPACED = {"LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S": "1000", "LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST": "1000"}
assert procfile  # the worker line is the Procfile's (bench.stacks.PROCFILE)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def dispatch_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # The vendor's pace is its slowness (SLOW_VENDOR), not the shared rate limit, whose reservations
    # would interleave the order the broker hands tasks out in.
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=UNPACED)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def capped_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # a short lease: the sweep (run by the test, as beat would) re-drives what a SIGKILLed worker held
    extra = {**UNPACED, "LIAISON_PROVIDER_SIM_MAX_IN_FLIGHT": str(CAP), "LIAISON_OUTBOX_LEASE_S": "3"}
    db, broker = request.param
    if db == "sqlite":
        yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)
        return
    # A database of its own: the capacity counts every open task of the provider, and the session's
    # shared PostgreSQL database holds other tests' tasks left open at the vendor.
    url, name = services.create_postgres_database()
    try:
        stack = build_stack(
            f"{db}-{broker}",
            database_url=url,
            broker_url=services.BROKERS[broker],
            vendor_url=vendor.url,
            vendor_secret=vendor_secret,
            tmp=tmp_path_factory.mktemp(f"capped-{db}-{broker}"),
            extra_env=extra,
        )
        yield stack
        stack.close()
    finally:
        services.drop_postgres_database(name)


def _client(stack: Stack, **limits: Any) -> str:
    """A fresh client whose submit limits do not get in the way of a backlog."""
    api_key, _, _ = stack.new_client()
    with stack.db.transaction() as session:
        client = authenticate(session, api_key)
        assert client is not None
        row = session.get(Client, client.id)
        assert row is not None
        row.submit_rate_per_s, row.submit_burst, row.max_open_tasks = 1000.0, 1000, 100000
        for name, value in limits.items():
            setattr(row, name, value)
    return api_key


#: A vendor that takes half a second to answer a submit: the workers' four threads take 8 jobs a
#: second, while a client submits faster, so its backlog builds.
SLOW_VENDOR = {"slow_s": 0.5}


def _submit(stack: Stack, api_key: str, ids: list[str], simulate: dict[str, Any] | None = None, **fields: Any) -> None:
    for cid in ids:
        body = {"correlation_id": cid, "input": {"simulate": simulate or {}}, **fields}
        response = stack.submit(api_key, body)
        assert response.status_code == 202, response.text


def _wait(
    condition: Callable[[], Any], what: str, timeout: float = 120, every: Callable[[], None] | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        if every is not None:
            every()
        time.sleep(0.2)
    return found


def _states(stack: Stack, ids: list[str]) -> dict[str, str]:
    with stack.db.transaction() as session:
        rows = session.execute(
            select(ExternalTask.correlation_id, ExternalTask.state).where(ExternalTask.correlation_id.in_(ids))
        )
        return dict(rows.tuples().all())


def _all_final(stack: Stack, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(s in ("succeeded", "failed", "canceled") for s in _states(stack, ids).values())


def _vendor_jobs(stack: Stack, ids: list[str]) -> list[dict[str, Any]]:
    """The simulator's jobs for these tasks, in the order the vendor created them."""
    with stack.db.transaction() as session:
        refs = dict(
            session.execute(
                select(ExternalTask.reference, ExternalTask.correlation_id).where(ExternalTask.correlation_id.in_(ids))
            )
            .tuples()
            .all()
        )
    jobs = [job for job in stack.vendor("GET", "/_sim/jobs").json()["jobs"] if job["reference"] in refs]
    return sorted(({**job, "task": refs[job["reference"]]} for job in jobs), key=lambda job: job["created_at"])


def _most_open_at_once(jobs: list[dict[str, Any]]) -> int:
    """The most jobs open at the vendor at any moment, from its own creation and finish times."""
    edges = sorted([(j["created_at"], 1) for j in jobs] + [(j["finished_at"] or float("inf"), -1) for j in jobs])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


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
    key_a, key_b = _client(stack), _client(stack)
    tag = uuid.uuid4().hex[:6]
    backlog = [f"backlog-{tag}-{i}" for i in range(40)]
    b_task = f"other-{tag}"
    _submit(stack, key_a, backlog, simulate=SLOW_VENDOR)
    _submit(stack, key_b, [b_task])
    _wait(_all_final(stack, [*backlog, b_task]), "every task finished")

    jobs = _vendor_jobs(stack, [*backlog, b_task])
    assert len(jobs) == 41  # one job per task, none twice
    ahead = [job["task"] for job in jobs[: [j["task"] for j in jobs].index(b_task)]]
    queued = _queued(stack, backlog)
    print(f"\n{stack.name}: {queued} of A's 40 waited in the database; B's task reached the vendor after {len(ahead)}")
    assert queued >= 10  # A did hold a backlog when B submitted
    # B waited behind at most A's window, and the few of A's tasks that A's finished submissions
    # released in the moment between A's last submit and B's (the workers take 8 a second): not 39
    assert len(ahead) <= WINDOW + 4


@pytest.mark.timeout(240)
def test_a_priority_1_task_overtakes_its_clients_queued_priority_3_work(dispatch_stack: Stack) -> None:
    stack = dispatch_stack
    api_key = _client(stack)
    tag = uuid.uuid4().hex[:6]
    batch = [f"batch-{tag}-{i}" for i in range(30)]
    urgent = f"urgent-{tag}"
    _submit(stack, api_key, batch, simulate=SLOW_VENDOR, priority=3)
    _submit(stack, api_key, [urgent], priority=1)
    _wait(_all_final(stack, [*batch, urgent]), "every task finished")
    order = [job["task"] for job in _vendor_jobs(stack, [*batch, urgent])]
    print(f"\n{stack.name}: the priority-1 task reached the vendor after {order.index(urgent)} of 30 priority-3 tasks")
    assert order.index(urgent) <= WINDOW + 4
    assert stack.get(api_key, urgent)["priority"] == 1


@pytest.mark.timeout(240)
def test_the_vendor_never_sees_more_than_its_capacity_and_a_waiting_task_says_why(capped_stack: Stack) -> None:
    stack = capped_stack
    key_a, key_b = _client(stack), _client(stack)
    tag = uuid.uuid4().hex[:6]
    slow = {"complete_delay_s": 1.0}
    a_ids = [f"cap-a-{tag}-{i}" for i in range(6)]
    b_ids = [f"cap-b-{tag}-{i}" for i in range(6)]
    for i in range(6):  # interleaved: both clients hold a backlog
        _submit(stack, key_a, [a_ids[i]], simulate=slow)
        _submit(stack, key_b, [b_ids[i]], simulate=slow)
    waiting = stack.get(key_b, b_ids[-1])["waiting"]
    assert waiting is not None and waiting["reason"] == "vendor_capacity", waiting
    _wait(_all_final(stack, a_ids + b_ids), "every task finished")
    jobs = _vendor_jobs(stack, a_ids + b_ids)
    assert len(jobs) == 12 and {j["status"] for j in jobs} == {"succeeded"}
    most = _most_open_at_once(jobs)
    print(f"\n{stack.name}: at most {most} jobs open at the vendor at once (MAX_IN_FLIGHT={CAP})")
    assert most <= CAP
    # shared: neither client's six went through before the other's began
    order = [job["task"].split("-")[1] for job in jobs]
    assert "b" in order[:4] and "a" in order[:4], order
    assert stack.get(key_b, b_ids[-1])["waiting"] is None


@pytest.mark.timeout(300)
def test_capacity_holds_with_a_second_worker_that_is_killed(capped_stack: Stack, tmp_path: Path) -> None:
    """A second worker process (the Procfile's worker line) shares the work queue and is SIGKILLed
    while it holds submissions: the vendor still never has more than the capacity open, and every
    task ends with one job (the sweep re-drives what the dead worker held)."""
    stack = capped_stack
    api_key = _client(stack)
    tag = uuid.uuid4().hex[:6]
    ids = [f"kill-{tag}-{i}" for i in range(12)]
    worker = Proc("second-worker", PROCFILE["worker"], {**base_env(), **stack.env}, tmp_path)
    try:
        _submit(stack, api_key, ids, simulate={"slow_s": 0.5, "complete_delay_s": 0.5})
        _wait(lambda: sum(s != "requested" for s in _states(stack, ids).values()) >= 3, "three reached the vendor")
        worker.popen.send_signal(signal.SIGKILL)
        worker.kill()
    finally:
        worker.stop()

    def sweep() -> None:  # what beat's sweep does every 30 s
        from models.base import utcnow

        stack.ctx.publisher.sweep(utcnow(), stack.settings.outbox_grace_s, stack.settings.outbox_lease_s)

    _wait(_all_final(stack, ids), "every task finished after the kill", every=sweep)
    jobs = _vendor_jobs(stack, ids)
    assert sorted(j["task"] for j in jobs) == sorted(ids)  # one job per task: none lost, none twice
    most = _most_open_at_once(jobs)
    print(f"\n{stack.name}: a worker SIGKILLed mid-run; at most {most} jobs open at the vendor (MAX_IN_FLIGHT={CAP})")
    assert most <= CAP


@pytest.mark.timeout(240)
def test_a_concurrency_key_keeps_one_job_open_at_a_time(dispatch_stack: Stack) -> None:
    stack = dispatch_stack
    api_key = _client(stack)
    tag = uuid.uuid4().hex[:6]
    keyed = [f"acct-{tag}-{i}" for i in range(4)]
    free = [f"free-{tag}-{i}" for i in range(2)]
    for cid in keyed:
        _submit(stack, api_key, [cid], concurrency_key=f"account-{tag}", simulate={"complete_delay_s": 0.5})
    _submit(stack, api_key, free)
    _wait(_all_final(stack, keyed + free), "every task finished")
    jobs = _vendor_jobs(stack, keyed)
    assert [j["task"] for j in jobs] == keyed  # in order
    assert _most_open_at_once(jobs) == 1
    # the client's other tasks did not wait for the key
    order = [job["task"] for job in _vendor_jobs(stack, keyed + free)]
    assert max(order.index(f) for f in free) < order.index(keyed[-1])
