"""A vendor's capacity (LIAISON_PROVIDER_<NAME>_MAX_IN_FLIGHT) end to end, both databases and both
brokers: the vendor never has more jobs open than the capacity, as the vendor itself counts them (the
simulator's job times), shared across clients and also with a second calls process that is SIGKILLed; a
waiting task says why.

One stack per module: two in-process workers alive at once in one process share Celery's worker
state, so the capped stack has a module of its own rather than living beside test_fair_dispatch's."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.procs import Proc, procfile
from bench.stacks import PROCFILE, base_env
from tests.integration import services
from tests.integration.conftest import PAIRS, _stack
from tests.integration.dispatch_support import (
    UNPACED,
    all_final,
    most_open_at_once,
    new_client,
    states,
    submit,
    vendor_jobs,
    wait,
)
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread

CAP = 3
assert callable(procfile)  # the second calls process's line is the Procfile's (bench.stacks.PROCFILE)


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


@pytest.mark.timeout(240)
def test_the_vendor_never_sees_more_than_its_capacity_and_a_waiting_task_says_why(capped_stack: Stack) -> None:
    stack = capped_stack
    key_a, key_b = new_client(stack), new_client(stack)
    tag = uuid.uuid4().hex[:6]
    slow = {"complete_delay_s": 1.0}
    a_ids = [f"cap-a-{tag}-{i}" for i in range(6)]
    b_ids = [f"cap-b-{tag}-{i}" for i in range(6)]
    for i in range(6):  # interleaved: both clients hold a backlog
        submit(stack, key_a, [a_ids[i]], simulate=slow)
        submit(stack, key_b, [b_ids[i]], simulate=slow)
    waiting = stack.get(key_b, b_ids[-1])["waiting"]
    assert waiting is not None and waiting["reason"] == "vendor_capacity", waiting
    wait(all_final(stack, a_ids + b_ids), "every task finished")
    jobs = vendor_jobs(stack, a_ids + b_ids)
    assert len(jobs) == 12 and {j["status"] for j in jobs} == {"succeeded"}
    most = most_open_at_once(jobs)
    print(f"\n{stack.name}: at most {most} jobs open at the vendor at once (MAX_IN_FLIGHT={CAP})")
    assert most <= CAP
    # shared: neither client's six went through before the other's began
    order = [job["task"].split("-")[1] for job in jobs]
    assert "b" in order[:4] and "a" in order[:4], order
    assert stack.get(key_b, b_ids[-1])["waiting"] is None


@pytest.mark.timeout(300)
def test_capacity_holds_with_a_second_worker_that_is_killed(capped_stack: Stack, tmp_path: Path) -> None:
    """A second calls process (the Procfile's calls line) shares the calls queue and is SIGKILLed
    while it holds submissions: the vendor still never has more than the capacity open, and every
    task ends with one job (the sweep re-drives what the dead worker held)."""
    stack = capped_stack
    api_key = new_client(stack)
    tag = uuid.uuid4().hex[:6]
    ids = [f"kill-{tag}-{i}" for i in range(12)]
    worker = Proc("second-calls", PROCFILE["calls"], {**base_env(), **stack.env}, tmp_path)
    try:
        submit(stack, api_key, ids, simulate={"slow_s": 0.5, "complete_delay_s": 0.5})
        wait(lambda: sum(s != "requested" for s in states(stack, ids).values()) >= 3, "three reached the vendor")
        worker.popen.send_signal(signal.SIGKILL)
        worker.kill()
    finally:
        worker.stop()

    def sweep() -> None:  # what beat's sweep does every 30 s
        from models.base import utcnow

        stack.ctx.publisher.sweep(utcnow(), stack.settings.outbox_grace_s, stack.settings.outbox_lease_s)

    wait(all_final(stack, ids), "every task finished after the kill", every=sweep)
    jobs = vendor_jobs(stack, ids)
    assert sorted(j["task"] for j in jobs) == sorted(ids)  # one job per task: none lost, none twice
    most = most_open_at_once(jobs)
    print(f"\n{stack.name}: a calls process SIGKILLed; at most {most} jobs open at the vendor (MAX_IN_FLIGHT={CAP})")
    assert most <= CAP
