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
import requests

from bench.procs import Proc, procfile
from bench.stacks import PROCFILE, base_env
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
from tests.integration.stack import Stack
from tests.support.servers import ServerThread

CAP = 3
assert callable(procfile)  # the second calls process's line is the Procfile's (bench.stacks.PROCFILE)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def capped_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # a short lease: the sweep (run by the test, as beat would) re-drives what a SIGKILLed worker held
    extra = {**UNPACED, "LIAISON_PROVIDER_SIM_MAX_IN_FLIGHT": str(CAP), "LIAISON_OUTBOX_LEASE_S": "3"}
    # a vendor that answers a submit seconds after it created the job is slow, not silent
    extra["LIAISON_PROVIDER_SIM_READ_TIMEOUT_S"] = "10"
    # On PostgreSQL a database of its own: the capacity counts every open task of the provider, and
    # the session's shared database holds other tests' tasks left open at the vendor.
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra, own_database=True)


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


@pytest.mark.timeout(240)
def test_a_task_canceled_while_its_submit_is_in_flight_keeps_its_vendor_slot(capped_stack: Stack) -> None:
    """The vendor has created the job and not yet answered the submit when the task is canceled: the
    task keeps counting against the capacity until the answer comes and the job is canceled there.
    Freed at the cancel, the slot would go to the next task while the vendor still holds the job:
    one more job open at the vendor than its capacity."""
    stack = capped_stack
    api_key = new_client(stack)
    tag = uuid.uuid4().hex[:6]
    fillers = [f"fill-{tag}-{i}" for i in range(CAP - 1)]
    submit(stack, api_key, fillers, simulate={"complete_delay_s": 600})
    wait(lambda: all(s != "requested" for s in states(stack, fillers).values()), "the fillers reached the vendor")
    slow, late = f"slow-{tag}", f"late-{tag}"
    submit(stack, api_key, [slow], simulate={"slow_s": 5, "complete_delay_s": 600})  # answers 5 s after creating
    reference = stack.reference(slow)
    wait(lambda: stack.vendor("GET", f"/jobs?reference={reference}").json()["jobs"], "the vendor created the job")
    cancel = requests.post(
        f"{stack.web.url}/api/v1/tasks/{slow}/cancel", headers={"Authorization": f"Bearer {api_key}"}, timeout=10
    )
    assert cancel.status_code == 202, cancel.text
    submit(stack, api_key, [late], simulate={"complete_delay_s": 0.2})
    waiting = stack.get(api_key, late)["waiting"]  # the vendor holds CAP jobs: the fillers and the slow one

    def timeline() -> list[str]:
        return [e["kind"] for e in stack.get(api_key, slow)["timeline"]]

    # the vendor answered after the cancel: the case at hand
    wait(lambda: "submission.late" in timeline(), "the slow submit answered after the cancel")
    wait(lambda: states(stack, [slow]).get(slow) == "canceled", "the slow task canceled")
    for cid in fillers:
        requests.post(
            f"{stack.web.url}/api/v1/tasks/{cid}/cancel", headers={"Authorization": f"Bearer {api_key}"}, timeout=10
        ).raise_for_status()
    ids = [*fillers, slow, late]
    wait(all_final(stack, ids), "every task finished")
    jobs = vendor_jobs(stack, ids)
    assert sorted(j["task"] for j in jobs) == sorted(ids)
    assert next(j for j in jobs if j["task"] == slow)["status"] == "canceled"
    assert most_open_at_once(jobs) <= CAP, jobs
    assert waiting is not None and waiting["reason"] == "vendor_capacity", waiting
