"""Slowloris: connections that never finish their request hold sockets of the web process, never
the threads that serve everyone else.

The web is the Procfile's line as a deploy runs it (gunicorn.conf.py, 2 workers × 4 threads, the
shipped read deadlines), on 127.0.0.1. Two hundred connections are held open against it: some send
half a head, some a whole head with ``Content-Length`` and half the body, some nothing at all, some
a whole request with ``Connection: close`` after which they neither read nor close. Meanwhile
/healthz, an authenticated submit and a signed vendor webhook are each answered, as they would be
with nobody else connected. (Before the read-ahead worker, gunicorn's ``gthread`` gave each of the
first eight a thread that waited on its socket with no deadline, and /healthz never answered.)

A second web with short deadlines (the same settings a deploy may lower) shows the held
connections are then closed by the server: 408 for a part-sent request, a silent close for one that
sent nothing.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import PAIRS, _stack
from tests.integration.procfile_worker import procfile_web
from tests.integration.services import free_port
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event

#: What the test holds open against the web: far more than its 8 threads.
HALF_HEADS, HALF_BODIES, SILENT, UNCLOSED = 80, 50, 50, 20
CLIENT_TIMEOUT_S = 10  # only so that a failing run ends; nothing here is timed


@pytest.fixture(scope="module", params=[PAIRS[1]], ids=lambda c: f"{c[0]}-{c[1]}")
def slow_stack(
    request: pytest.FixtureRequest, vendor, vendor_secret: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory)


@contextmanager
def shipped_web(stack: Stack, log_dir: Path, **extra: str) -> Iterator[str]:
    """The Procfile's web line on a free loopback port, its metrics cache at the shipped value
    (nothing here reads gauges): its URL."""
    with procfile_web(stack, log_dir, free_port(), unset=("LIAISON_METRICS_CACHE_S",), **extra) as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S)


@contextmanager
def held_connections(url: str) -> Iterator[dict[str, list[socket.socket]]]:
    """Connections of each kind, open until the block ends."""
    host = url.removeprefix("http://")
    sends = {
        "half head": f"POST /api/v1/tasks HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nX-Pad".encode(),
        "half body": (
            f"POST /webhooks/sim HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 1000\r\n\r\n" + '{"type": "job.accepted", '
        ).encode(),
        "silent": b"",
        "unclosed": f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(),
    }
    counts = {"half head": HALF_HEADS, "half body": HALF_BODIES, "silent": SILENT, "unclosed": UNCLOSED}
    with ExitStack() as cleanup:
        held: dict[str, list[socket.socket]] = {}
        for kind, count in counts.items():
            held[kind] = []
            for _ in range(count):
                sock = cleanup.enter_context(_connect(url))
                if sends[kind]:
                    sock.sendall(sends[kind])
                held[kind].append(sock)
        yield held


def test_slow_and_half_open_connections_hold_no_thread(slow_stack: Stack, vendor_secret: str, tmp_path: Path) -> None:
    api_key, _, _ = slow_stack.new_client()
    with shipped_web(slow_stack, tmp_path) as url, held_connections(url) as held:
        assert sum(len(socks) for socks in held.values()) == 200

        def healthz(_: int) -> int:
            return requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT_S).status_code

        def submit(n: int) -> tuple[int, str]:
            response = slow_stack.submit(api_key, {"input": {"n": n}}, key=f"slow-{uuid.uuid4().hex}", url=url)
            return response.status_code, response.json().get("correlation_id", "")

        def webhook(n: int) -> tuple[int, str]:
            event = {"type": "job.accepted", "job_id": f"job_slowloris_{uuid.uuid4().hex}"}
            response = post_event(url, vendor_secret, event)
            return response.status_code, response.json().get("status", "")

        # Concurrently, as a busy deploy sees them; a sequence would pass one thread at a time.
        with ThreadPoolExecutor(12) as pool:
            health = list(pool.map(healthz, range(12)))
            submits = list(pool.map(submit, range(8)))
            hooks = list(pool.map(webhook, range(8)))

        assert health == [200] * 12
        assert [status for status, _ in submits] == [202] * 8 and all(cid for _, cid in submits)
        assert hooks == [(200, "orphan")] * 8  # signed, accepted, kept for a job not known yet

        # The held ones are still held: nothing above was answered by closing them.
        still_open = [s for kind in ("half head", "half body", "silent") for s in held[kind] if _open(s)]
        assert len(still_open) == HALF_HEADS + HALF_BODIES + SILENT

    # The submits were real: the stack's worker takes them to the vendor.
    for _, cid in submits:
        slow_stack.wait_for_task(api_key, cid, timeout=60)


def _open(sock: socket.socket) -> bool:
    """Neither answered nor closed by the server: nothing to read yet."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)  # bytes (an answer) or b"" (closed)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(CLIENT_TIMEOUT_S)


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_a_deploy_with_short_read_deadlines_closes_the_held_connections(slow_stack: Stack, tmp_path: Path) -> None:
    short = {"LIAISON_HEADER_READ_TIMEOUT_S": "1", "LIAISON_BODY_READ_TIMEOUT_S": "2"}
    with shipped_web(slow_stack, tmp_path, **short) as url, held_connections(url) as held:
        answers = {kind: [_answer(s) for s in socks] for kind, socks in held.items()}
        assert requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT_S).status_code == 200

    timeout = b"HTTP/1.1 408 Request Timeout\r\n"
    assert [a[: len(timeout)] for a in answers["half head"]] == [timeout] * HALF_HEADS
    assert [a[: len(timeout)] for a in answers["half body"]] == [timeout] * HALF_BODIES
    assert answers["silent"] == [b""] * SILENT
    assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") for a in answers["unclosed"])
