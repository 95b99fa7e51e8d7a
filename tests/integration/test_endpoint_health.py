"""Endpoint health end to end (core.endpoint_health): a client's callback endpoint that keeps failing
is paused — its relays wait without calling it — probed after a doubling pause, and resumes by itself
once it answers; the admin API and ``/metrics`` show it meanwhile. Both databases and brokers.

Short pauses (2 s, then 4 s) so that the test takes seconds; which failures pause, how a pause
grows, and that a probe lets one delivery through are the same rules as with the shipped ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests

from models.endpoint_health import EndpointHealth
from tests.integration.conftest import PAIRS, _stack
from tests.integration.processes import parse_samples
from tests.integration.stack import METRICS_AUTH, Stack
from tests.support.servers import RecordedRequest, ServerThread

FAILURES_TO_PAUSE = 3
PAUSE_S = 2.0
PAUSE_CAP_S = 4.0


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def health_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    extra = {
        "LIAISON_ENDPOINT_FAILURES_TO_PAUSE": str(FAILURES_TO_PAUSE),
        "LIAISON_ENDPOINT_PAUSE_S": str(PAUSE_S),
        "LIAISON_ENDPOINT_PAUSE_CAP_S": str(PAUSE_CAP_S),
        # the relays must outlive the pauses: attempts, not the schedule, would end them otherwise
        "LIAISON_RELAY_MAX_ATTEMPTS": "60",
    }
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)


def _wait(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)
    return found


def _health(stack: Stack, client: str) -> dict[str, Any] | None:
    items = stack.admin("GET", "/callback-endpoints/health").json()["items"]
    return next((item for item in items if item["client"] == client), None)


def _unhealthy_gauge(stack: Stack, state: str) -> float | None:
    text = requests.get(f"{stack.web.url}/metrics", headers=METRICS_AUTH, timeout=10).text
    return parse_samples(text).get(("liaison_callback_endpoints_unhealthy", frozenset({("state", state)})))


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.timeout(180)
def test_a_failing_endpoint_is_paused_probed_and_resumes_by_itself(health_stack: Stack) -> None:
    stack = health_stack
    api_key, _, path = stack.new_client()
    client = stack.client_name(api_key)
    stack.callbacks.set_status(path, 503)
    ids = [f"health-{path.rsplit('/', 1)[1]}-{i}" for i in range(2)]
    for cid in ids:
        assert stack.submit(api_key, {"correlation_id": cid, "input": "x"}).status_code == 202

    # Failures in a row pause it; a failed probe pauses it again, twice as long (capped).
    paused = _wait(
        lambda: (h := _health(stack, client)) and h["state"] == "paused" and h["pauses"] >= 2 and h,
        "the endpoint was paused and a probe failed",
    )
    waiting = stack.get(api_key, ids[0])["callbacks_waiting"]
    assert waiting is not None and waiting["reason"] == "endpoint_paused", waiting
    stack.callbacks.set_status(path, 204)  # it answers again
    assert paused["origin"] == stack.callback_server.url
    pause = _time(paused["paused_until"]) - _time(paused["last_failure_at"])
    assert pause == timedelta(seconds=min(PAUSE_CAP_S, PAUSE_S * 2 ** (paused["pauses"] - 1)))
    # the session's PostgreSQL database is shared by every stack: other tests' endpoints count too
    assert (_unhealthy_gauge(stack, "paused") or 0) >= 1

    # Every failed call was counted once, and each pause held every relay back: the one after
    # the snapshot's pause came no sooner than its end.
    failed = [r for r in stack.callbacks.posts_to(path) if r.status == 503]
    assert len(failed) == paused["failures"] >= FAILURES_TO_PAUSE + 1
    first_after = _wait(
        lambda: [r for r in stack.callbacks.posts_to(path) if r.at > failed[-1].at],
        "the probe after the pause",
    )[0]
    assert first_after.at >= _time(paused["paused_until"]).timestamp()

    # The probe succeeded: the endpoint is healthy again and every callback went, in order per task.
    for cid in ids:

        def after_the_first(cid: str = cid) -> list[RecordedRequest]:
            ok = [r for r in stack.callbacks.posts_to(path) if r.status == 204 and r.json()["correlation_id"] == cid]
            return ok[1:]

        _wait(after_the_first, f"both callbacks of {cid} delivered")
        delivered = [
            r.json()["type"]
            for r in stack.callbacks.posts_to(path)
            if r.status == 204 and r.json()["correlation_id"] == cid
        ]
        assert delivered == ["task.accepted", "task.completed"], delivered
    assert _health(stack, client) is None
    paused_now = [i for i in stack.admin("GET", "/callback-endpoints/health").json()["items"] if i["state"] == "paused"]
    assert _unhealthy_gauge(stack, "paused") == len(paused_now)  # this one no longer among them
    assert stack.get(api_key, ids[0])["callbacks_waiting"] is None
    with stack.db.transaction() as session:
        row = session.query(EndpointHealth).filter_by(origin=stack.callback_server.url).one()
        assert (row.failures, row.pauses, row.paused_until, row.probe_until) == (0, 0, None, None)
        assert row.resumed_at is not None


@pytest.mark.timeout(120)
def test_one_clients_failing_endpoint_does_not_pause_another_clients_calls_to_it(health_stack: Stack) -> None:
    """Health is per client: the same origin, failing for A's path, still serves B at once."""
    stack = health_stack
    key_a, _, path_a = stack.new_client()
    key_b, _, path_b = stack.new_client()
    stack.callbacks.set_status(path_a, 503)
    for i in range(2):
        assert stack.submit(key_a, {"correlation_id": f"sick-{path_a[-8:]}-{i}", "input": "x"}).status_code == 202
    _wait(lambda: (h := _health(stack, stack.client_name(key_a))) and h["state"] == "paused", "A's endpoint paused")
    b_id = f"well-{path_b[-8:]}"
    assert stack.submit(key_b, {"correlation_id": b_id, "input": "x"}).status_code == 202
    stack.callbacks.wait_for(
        lambda reqs: any(r.path == path_b and r.json()["type"] == "task.completed" for r in reqs), timeout=30
    )
    assert _health(stack, stack.client_name(key_b)) is None
    stack.callbacks.set_status(path_a, 204)  # let A's relays finish before the module's stack closes
