"""A calls process SIGKILLed while it holds released submissions (issue 44, point 5), on a real
broker with the Procfile's calls line: a new one finishes them with the shipped outbox lease
(1,800 s), because each message's own start lease re-drives it, and the vendor creates one job per
task.

On Redis the killed worker's messages (the ones it was calling with, and those it held back for a
call slot) stay unacked until the 12 h visibility timeout: before start leases they waited for the
outbox lease, and this test timed out. RabbitMQ gives them back when the connection closes; it is
run too, for the copies that then meet the re-driven ones (none may run twice at the vendor). The
sweep is run by the test, as beat runs it every 30 s."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.base import utcnow
from tests.integration.conftest import _stack
from tests.integration.dispatch_support import UNPACED, all_final, new_client, states, submit, vendor_jobs, wait
from tests.integration.procfile_worker import procfile_worker
from tests.integration.stack import Stack
from tests.support.servers import ServerThread

CAP = 4
LAYOUTS = [("sqlite", "redis"), ("postgres", "redis"), ("postgres", "rabbitmq")]
#: short calls and margin, so a start lease is seconds (2 × (3 + 2) + 1 = 11 s); the outbox lease
#: keeps its shipped 1,800 s. Two call slots: the calls process holds released tasks it has not
#: started (waiting for a slot) as well as the ones it is calling with.
EXTRA = {
    **UNPACED,
    "LIAISON_PROVIDER_SIM_MAX_IN_FLIGHT": str(CAP),
    "LIAISON_PROVIDER_SIM_MAX_CONCURRENT_CALLS": "2",
    "LIAISON_PROVIDER_SIM_CALL_DEADLINE_S": "3",
    "LIAISON_START_LEASE_MARGIN_S": "1",
}


@pytest.fixture(scope="module", params=LAYOUTS, ids=lambda c: f"{c[0]}-{c[1]}")
def lease_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    # on PostgreSQL a database of its own: the capacity counts every open task of the provider
    yield from _stack(
        request, vendor, vendor_secret, tmp_path_factory, extra_env=EXTRA, calls_in_process=False, own_database=True
    )


@pytest.mark.timeout(300)
def test_submissions_a_killed_calls_process_held_finish_by_their_start_leases(
    lease_stack: Stack, tmp_path: Path
) -> None:
    stack = lease_stack
    assert stack.settings.outbox_lease_s == 1800  # the shipped default: recovery cannot come from it
    assert stack.settings.start_leases["submit"] == 11
    api_key = new_client(stack)
    ids = [f"lease-{uuid.uuid4().hex[:6]}-{i}" for i in range(10)]
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with procfile_worker(stack, "calls", tmp_path / "first") as first:
        submit(stack, api_key, ids, simulate={"slow_s": 1.0})
        wait(lambda: sum(s != "requested" for s in states(stack, ids).values()) >= 1, "one reached the vendor")
        first.popen.send_signal(signal.SIGKILL)
        first.kill()
    left = sorted(cid for cid, s in states(stack, ids).items() if s == "requested")
    assert left, "the killed process held nothing: nothing to recover"

    def sweep() -> None:  # what beat's sweep does every 30 s
        stack.ctx.publisher.sweep(utcnow(), stack.settings.outbox_grace_s, stack.settings.outbox_lease_s)

    with procfile_worker(stack, "calls", tmp_path / "second"):
        wait(all_final(stack, ids), "every task finished after the kill", timeout=180, every=sweep)
    jobs = vendor_jobs(stack, ids)
    assert sorted(j["task"] for j in jobs) == sorted(ids)  # one job per task: none lost, none twice
    assert {j["status"] for j in jobs} == {"succeeded"}
    print(f"\n{stack.name}: {len(left)} of {len(ids)} tasks were still requested at the kill; all finished once")
