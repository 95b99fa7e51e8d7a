"""What the fair-dispatch tests share: clients whose submit limits stay out of the way, submitting
and waiting, and the vendor's own record of its jobs (the simulator's creation and finish times), from
which the tests read orders and the most jobs open at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from core.states import TERMINAL
from models.client import Client
from models.task import ExternalTask
from service.credentials import authenticate
from tests.integration.stack import Stack

#: The vendor's pace is its slowness (HELD), not the shared rate limit, whose reservations
#: would interleave the order the broker hands tasks out in.
UNPACED = {"LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S": "1000", "LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST": "1000"}


def new_client(stack: Stack, **limits: Any) -> str:
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


#: A vendor that takes 1.5 s to answer a submit: the test workers' four threads take fewer than three
#: jobs a second, so while a backlog of 40 is being submitted the vendor takes only a few of them and
#: most of it still waits when the measured task comes, whatever the machine's pace.
HELD = {"slow_s": 1.5}


def submit(stack: Stack, api_key: str, ids: list[str], simulate: dict[str, Any] | None = None, **fields: Any) -> None:
    for cid in ids:
        body = {"correlation_id": cid, "input": {"simulate": simulate or {}}, **fields}
        response = stack.submit(api_key, body)
        assert response.status_code == 202, response.text


def wait(condition: Callable[[], Any], what: str, timeout: float = 120, every: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        if every is not None:
            every()
        time.sleep(0.2)
    return found


def states(stack: Stack, ids: list[str]) -> dict[str, str]:
    with stack.db.transaction() as session:
        rows = session.execute(
            select(ExternalTask.correlation_id, ExternalTask.state).where(ExternalTask.correlation_id.in_(ids))
        )
        return dict(rows.tuples().all())


def all_final(stack: Stack, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(s in TERMINAL for s in states(stack, ids).values())


def vendor_jobs(stack: Stack, ids: list[str]) -> list[dict[str, Any]]:
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


def most_open_at_once(jobs: list[dict[str, Any]]) -> int:
    """The most jobs open at the vendor at any moment, from its own creation and finish times."""
    edges = sorted([(j["created_at"], 1) for j in jobs] + [(j["finished_at"] or float("inf"), -1) for j in jobs])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
