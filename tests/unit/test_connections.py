"""Kept connections (workers.connections): a call reuses the connection the last call to that host
read to its end, within KEEP_ALIVE_S; never one whose body was cut off, never across the two kinds
of call, never across a fork. A real HTTP/1.1 server on 127.0.0.1 counts the connections it accepts."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import cast

import pytest

from core.outbound_guard import AllowList
from workers import connections, http


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def setup(self) -> None:
        super().setup()
        server = cast(CountingServer, self.server)  # the server this handler class is given to
        with server.lock:
            server.connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"x" * int(self.path.rsplit("/", 1)[-1] or 0)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[CountingServer]:
    srv = CountingServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _post(url: str, *, guarded: bool = False, max_body_bytes: int = 1024) -> int:
    allow = AllowList.parse(url.removeprefix("http://").split("/", 1)[0]) if guarded else None
    response = http.call(
        "POST",
        url,
        timeout=(2, 2),
        idempotent=True,
        deadline_s=5,
        max_body_bytes=max_body_bytes,
        truncate=True,
        guard=allow,
        data=b"{}",
    )
    return response.status_code


def test_calls_to_one_host_share_a_connection(server: CountingServer) -> None:
    for _ in range(5):
        assert _post(f"{server.url}/jobs/10") == 200
    assert server.connections == 1


def test_a_connection_idle_past_the_keep_alive_is_not_used_again(
    server: CountingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "KEEP_ALIVE_S", 0)
    for _ in range(3):
        assert _post(f"{server.url}/jobs/10") == 200
    assert server.connections == 3


def test_a_body_cut_off_at_the_cap_closes_its_connection(server: CountingServer) -> None:
    assert _post(f"{server.url}/jobs/5000", max_body_bytes=100) == 200  # truncated: the rest is unread
    assert _post(f"{server.url}/jobs/10") == 200
    assert server.connections == 2


def test_guarded_and_provider_calls_never_share_a_connection(server: CountingServer) -> None:
    assert _post(f"{server.url}/cb/1") == 200
    assert _post(f"{server.url}/cb/1", guarded=True) == 200
    assert _post(f"{server.url}/cb/1", guarded=True) == 200
    assert server.connections == 2


def test_a_forked_child_opens_its_own(server: CountingServer) -> None:
    assert _post(f"{server.url}/jobs/1") == 200
    pid = os.fork()
    if pid == 0:  # the child: one call, then out without running the parent's clean-up
        code = 0 if _post(f"{server.url}/jobs/1") == 200 else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert server.connections == 2


def test_one_watchdog_thread_serves_every_call(server: CountingServer) -> None:
    for _ in range(5):
        assert _post(f"{server.url}/jobs/1") == 200
    watchdogs = [t for t in threading.enumerate() if t.name == "liaison-call-watchdog"]
    assert len(watchdogs) == 1
