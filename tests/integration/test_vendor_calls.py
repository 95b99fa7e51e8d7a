"""A slow vendor holds sockets, not every worker (issue 20, point 4), on the shipped Procfile's
``calls`` line with its default threads and shares, both databases and both brokers.

Two providers: ``sim`` (the simulator) and ``slow`` (the same simulator behind a gate that holds
every ``POST /jobs`` until the test opens it: a vendor whose answers take as long as the test
likes, and which counts how many calls it holds at once). Two clients send 8 ``slow`` tasks each
(their dispatch windows: 16 on their way, as many as the calls process has threads); then a third
client sends ``sim`` tasks. Before the gate opens: every ``sim`` task reached its vendor, and the
gate holds exactly half of the 16 threads (the default share of each of two vendors). Then the gate
opens and every ``slow`` task reaches its vendor too. Orders and counts only, no wall-clock gaps."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.wrappers import Request, Response

from tests.integration.conftest import PAIRS, _stack
from tests.integration.dispatch_support import UNPACED, new_client, states, submit, wait
from tests.integration.procfile_worker import procfile_worker
from tests.integration.stack import Stack
from tests.support.servers import ServerThread

THREADS, SHARE = 16, 8  # the calls line's default threads, and each of two vendors' default share
HOP = {"host", "content-length", "transfer-encoding", "connection"}


class Gate:
    """In front of the simulator: ``POST /jobs`` waits until :attr:`opened` is set, counted."""

    #: where it listens, set by the ``gate`` fixture once its server is up
    url: str

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.opened = threading.Event()
        self._lock = threading.Lock()
        self.holding = self.most = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        held = request.method == "POST" and request.path == "/jobs"
        if held:
            with self._lock:
                self.holding += 1
                self.most = max(self.most, self.holding)
            self.opened.wait(150)
        try:
            answer = requests.request(
                request.method,
                self.upstream + request.full_path.rstrip("?"),
                data=request.get_data(),
                headers={k: v for k, v in request.headers.items() if k.lower() not in HOP},
                timeout=30,
            )
        finally:
            if held:
                with self._lock:
                    self.holding -= 1
        response = Response(answer.content, answer.status_code, content_type=answer.headers.get("Content-Type"))
        return response(environ, start_response)


@pytest.fixture(scope="module")
def gate(vendor: ServerThread) -> Iterator[Gate]:
    g = Gate(vendor.url)
    with ServerThread(g) as server:
        g.url = server.url
        yield g
        g.opened.set()


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def calls_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, gate: Gate, tmp_path_factory
) -> Iterator[Stack]:
    extra = {
        **UNPACED,
        "LIAISON_PROVIDERS": "sim,slow",
        "LIAISON_DEFAULT_PROVIDER": "sim",
        "LIAISON_PROVIDER_SLOW_BASE_URL": gate.url,
        "LIAISON_PROVIDER_SLOW_WEBHOOK_SECRETS": vendor_secret,
        "LIAISON_PROVIDER_SLOW_RATE_LIMIT_PER_S": "1000",
        "LIAISON_PROVIDER_SLOW_RATE_LIMIT_BURST": "1000",
        # the gate, not a timeout, ends the slow calls
        "LIAISON_PROVIDER_SLOW_READ_TIMEOUT_S": "150",
        "LIAISON_PROVIDER_SLOW_CALL_DEADLINE_S": "150",
    }
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra, calls_in_process=False)


@pytest.mark.timeout(240)
def test_a_slow_vendor_holds_its_share_of_the_call_threads_and_another_vendors_calls_go_on(
    calls_stack: Stack, gate: Gate, tmp_path: Path
) -> None:
    stack = calls_stack
    gate.opened.clear()
    gate.most = 0
    tag = uuid.uuid4().hex[:6]
    clients = [new_client(stack) for _ in "ab"]
    slow_ids = {key: [f"slow-{n}-{tag}-{i}" for i in range(8)] for n, key in enumerate(clients)}
    fast_key = new_client(stack)
    fast_ids = [f"fast-{tag}-{i}" for i in range(5)]
    with procfile_worker(stack, "calls", tmp_path) as calls:
        for key, ids in slow_ids.items():
            submit(stack, key, ids, provider="slow")
        every_slow = [cid for ids in slow_ids.values() for cid in ids]
        wait(lambda: gate.holding >= SHARE, f"the gate holds {SHARE} calls", every=lambda: _alive(calls))
        submit(stack, fast_key, fast_ids)
        wait(
            lambda: all(s != "requested" for s in states(stack, fast_ids).values()),
            "the other vendor's tasks reached it while the slow vendor held its calls",
            timeout=60,  # well inside the gate's own 150 s: it stays shut while this waits
            every=lambda: _alive(calls),
        )
        held, most = gate.holding, gate.most
        slow_states = states(stack, every_slow)
        gate.opened.set()
        print(f"\n{stack.name}: the slow vendor held {held} calls (at most {most}) of {THREADS} threads")
        assert held == most == SHARE, (held, most)
        assert set(slow_states.values()) == {"requested"}  # none answered: the gate was shut
        wait(
            lambda: all(s != "requested" for s in states(stack, every_slow).values()),
            "every slow task reached its vendor once it answered",
            every=lambda: _alive(calls),
        )
    assert gate.most == SHARE


def _alive(proc: Any) -> None:
    assert proc.popen.poll() is None, f"the calls process exited: {proc.log.read_text()[-3000:]}"
