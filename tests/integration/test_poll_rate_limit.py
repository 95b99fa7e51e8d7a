"""Polling a vendor that sends no webhooks, from two ``calls`` worker processes, inside its rate limit.

The vendor is the simulator's ``poll-only`` personality (it never calls back: ``GET /jobs/<id>`` is
the only way to learn a job's end), behind a recorder that notes every request's arrival instant and
which of the two Procfile ``calls`` processes sent it (the socket's owner, from /proc). The second
has a node name of its own (``-n calls-2@%h``), as a second host's would be: two workers of one name
would share one remote-control mailbox (a ping reaches one of them). Liaison polls
it on a one-second schedule (``LIAISON_PROVIDER_SIM_POLL_SCHEDULE_S``) with a limit of 2 calls per
second, burst 1 (``RATE_LIMIT_PER_S``, ``RATE_LIMIT_BURST``): the shared limit (Redis on the Redis
pair, the database on the other) is the only thing that keeps the two processes' 16 threads each
from asking at once. The poll job is run by hand, as beat would.

Counted at the vendor: in every one-second window, at most ``rate × 1 s + burst`` requests
(``core.rate_limit``'s guarantee for any window), the status polls alone and all calls together; both
processes made calls; every task ends succeeded with the vendor's outcome, and no webhook was sent.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import select

import simulator
from models import ProcessedMessage
from models.base import utcnow
from tests.integration.conftest import PAIRS, _stack
from tests.integration.processes import poll_while_moving
from tests.integration.procfile_worker import procfile_worker
from tests.integration.stack import Stack
from tests.support.servers import ServerThread
from webhooks.signing import generate_secret
from workers.polling import poll

pytestmark = pytest.mark.timeout(180)

RATE, BURST = 2.0, 1
TASKS = 10


@dataclass
class Arrival:
    at: float
    method: str
    path: str
    pid: int | None


def _socket_inodes(port: int) -> set[str]:
    """The inodes of the live TCP sockets whose local port is ``port`` (the client's end; a closed
    one of the same port in TIME_WAIT has inode 0 and no owner)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                found.add(fields[9])
    return found


def _owner(inodes: set[str], pids: list[int]) -> int | None:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None


@dataclass
class Recorder:
    """WSGI middleware in front of the real simulator: every request's arrival, in order."""

    app: Callable[..., Any]
    callers: list[int] = field(default_factory=list)  # the pids whose sockets are looked up
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        at = time.time()
        pid = _owner(_socket_inodes(int(environ.get("REMOTE_PORT") or 0)), self.callers)
        with self.lock:
            self.arrivals.append(Arrival(at, environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), pid))
        return self.app(environ, start_response)

    def calls(self, wanted: Callable[[Arrival], bool]) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if wanted(a)]


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[Recorder, ServerThread]]:
    app = simulator.create_app(
        {"SIMULATOR_PERSONALITY": "poll-only", "SIMULATOR_ACCEPT_DELAY_S": 0.1, "SIMULATOR_COMPLETE_DELAY_S": 0.5}
    )
    recording = Recorder(app)
    with ServerThread(recording) as server:
        yield recording, server


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def polled_stack(
    request: pytest.FixtureRequest, recorder: tuple[Recorder, ServerThread], tmp_path_factory
) -> Iterator[Stack]:
    _, server = recorder
    extra = {
        "LIAISON_PROVIDER_SIM_POLL_SCHEDULE_S": "1",
        "LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S": str(RATE),
        "LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST": str(BURST),
    }
    # the poll-only vendor signs nothing: the provider's secret is never used
    yield from _stack(request, server, generate_secret(), tmp_path_factory, extra_env=extra, calls_in_process=False)


def most_in_any_window(times: list[float], window_s: float = 1.0) -> int:
    """The most instants in any half-open window ``[t, t + window_s)``."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, at in enumerate(ordered):
        while at - ordered[start] >= window_s:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_most_in_any_window_counts_a_sliding_window() -> None:
    assert most_in_any_window([]) == 0
    assert most_in_any_window([0.0, 0.5, 0.99, 1.0, 1.6]) == 3
    assert most_in_any_window([0.0, 0.5, 1.0, 1.5, 2.0]) == 2


def test_two_calls_processes_poll_a_webhookless_vendor_within_its_rate_limit(
    polled_stack: Stack, recorder: tuple[Recorder, ServerThread], tmp_path: Path
) -> None:
    stack = polled_stack
    recording, server = recorder
    api_key, _, _ = stack.new_client()
    started = time.time()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with (
        procfile_worker(stack, "calls", tmp_path / "a") as first,
        procfile_worker(stack, "calls", tmp_path / "b", args="-n calls-2@%h") as second,
    ):
        recording.callers[:] = [first.pid, second.pid]
        cids = [f"poll-{uuid.uuid4().hex[:8]}" for _ in range(TASKS)]
        for n, cid in enumerate(cids):
            body = {"correlation_id": cid, "input": {"simulate": {"outcome_payload": {"n": n}}}}
            assert stack.submit(api_key, body, key=cid).status_code == 202

        def states() -> list[str]:
            return sorted(stack.get(api_key, cid)["state"] for cid in cids)

        def all_done() -> bool:
            poll(stack.ctx, utcnow())  # beat's poll job
            return states() == ["succeeded"] * TASKS

        def progress() -> tuple[list[str], int]:
            return states(), len(recording.calls(lambda a: a.at >= started))

        poll_while_moving("every polled task to succeed", all_done, progress, 30, interval=0.3)

    for n, cid in enumerate(cids):
        assert stack.get(api_key, cid)["outcome"] == {"n": n}
    ours = recording.calls(lambda a: a.at >= started and not a.path.startswith("/_sim"))
    statuses = [a.at for a in ours if a.method == "GET" and a.path.startswith("/jobs/")]
    assert len(statuses) >= TASKS  # at least one poll found each job finished
    limit = RATE * 1.0 + BURST
    assert most_in_any_window(statuses) <= limit, sorted(statuses)
    assert most_in_any_window([a.at for a in ours]) <= limit, [(a.at, a.method, a.path) for a in ours]
    assert {a.pid for a in ours} == {first.pid, second.pid}, [(a.method, a.path, a.pid) for a in ours]

    jobs = requests.get(server.url + "/_sim/jobs", timeout=5).json()
    references = {stack.reference(cid) for cid in cids}
    ids = {j["job_id"] for j in jobs["jobs"] if j["reference"] in references}
    assert len(ids) == TASKS
    assert all(d["result"] == "not_sent" for d in jobs["deliveries"] if d["job_id"] in ids)
    with stack.db.transaction() as session:
        inbox = session.scalars(select(ProcessedMessage.message_id).where(ProcessedMessage.source == "sim")).all()
    mine = [m for m in inbox if any(job_id in m for job_id in ids)]
    assert mine and all(m.startswith("reconcile:") for m in mine)  # what polls learned, nothing else
