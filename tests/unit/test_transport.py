"""The socket side of one call (workers.transport, through workers.http.call): pinning to the
checked address, no redirect, no proxy from the environment, the wall-clock deadline and the body cap.

No network: the connector hands urllib3 one end of a ``socket.socketpair()`` and a thread plays
the server on the other end, so the tests see exactly which address the call would have dialled
and exactly the bytes it sent.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest
import requests

from core.classify import Failure
from core.errors import OutboundRefused, PermanentError, TransientError, UncertainError
from core.outbound_guard import AllowList, Refused
from workers import connections, http, transport

PUBLIC = "8.8.8.8"  # data only: the connector below never dials it
PRIVATE = "10.0.0.7"
NOTHING = AllowList()


class FakeServer:
    """The far end of a socketpair: reads the request head, then runs ``script(sock)``."""

    def __init__(self, script: Callable[[socket.socket], None]) -> None:
        self.script = script
        self.dialled: list[tuple[str, int]] = []
        self.requests: list[bytes] = []
        self.closed = threading.Event()
        #: the test's thread, whose dials are this server's; another thread of the test process (a
        #: daemon an earlier module left behind, retrying its loopback peer) dials for real
        self.owner = threading.current_thread()
        self.real_connection = transport.urllib3_connection.create_connection

    def connector(self, address, timeout=None, source_address=None, socket_options=None) -> socket.socket:
        if threading.current_thread() is not self.owner:
            return self.real_connection(address, timeout, source_address, socket_options)
        self.dialled.append(address)
        ours, theirs = socket.socketpair()
        threading.Thread(target=self._serve, args=(theirs,), daemon=True).start()
        return ours

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.requests.append(data)
            try:
                self.script(sock)
                while sock.recv(65536):  # until the client closes or shuts the socket down
                    pass
            except OSError:
                pass
            finally:
                self.closed.set()


@pytest.fixture(autouse=True)
def one_connection_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fake server here serves one connection and waits for it to close: nothing is kept
    (test_connections.py tests keeping them)."""
    monkeypatch.setattr(connections, "KEEP_ALIVE_S", 0)


def answer(raw: bytes) -> Callable[[socket.socket], None]:
    return lambda sock: sock.sendall(raw)


def guarded(
    server: FakeServer,
    url: str,
    resolver,
    *,
    deadline_s: float = 10,
    max_body_bytes: int = 4096,
    truncate: bool = True,
    method: str = "POST",
) -> requests.Response:
    with transport.Call(deadline_s) as state:
        return transport.send(
            state,
            method,
            url,
            timeout=(5, 5),
            max_body_bytes=max_body_bytes,
            truncate=truncate,
            guard=NOTHING,
            resolver=resolver,
            connector=server.connector,
            data=b"{}",
        )


def test_the_connection_goes_to_the_checked_address_and_a_rebinding_is_refused():
    """The stub resolver answers a public address first and a private one second."""
    answers = iter([[PUBLIC], [PRIVATE]])
    lookups: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return next(answers)

    server = FakeServer(answer(b"HTTP/1.1 204 No Content\r\n\r\n"))
    response = guarded(server, "http://rebind.example:8080/cb?x=1", rebinding)
    assert response.status_code == 204
    assert lookups == ["rebind.example"]  # one lookup per call, not a second one by urllib3
    assert server.dialled == [(PUBLIC, 8080)]
    head = server.requests[0].decode()
    assert head.startswith("POST /cb?x=1 HTTP/1.1\r\n") and "\r\nHost: rebind.example:8080\r\n" in head

    with pytest.raises(Refused):  # the next call looks up again: now private, refused
        guarded(server, "http://rebind.example:8080/cb", rebinding)
    assert server.dialled == [(PUBLIC, 8080)]


def test_a_refusal_dials_nothing_and_names_nothing(monkeypatch):
    monkeypatch.setattr(transport, "system_resolver", lambda host, port: [PRIVATE])  # no DNS in unit tests
    server = FakeServer(answer(b"HTTP/1.1 204 No Content\r\n\r\n"))
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    for url in ("http://127.0.0.1:5301/_sim/reset", "http://u:p@callbacks.example/", "http://internal.example:6379/"):
        with pytest.raises(OutboundRefused) as info:
            http.call("POST", url, timeout=(5, 5), idempotent=True, deadline_s=5, max_body_bytes=10, guard=NOTHING)
        message = str(info.value)
        assert message.startswith("callback URL refused by the outbound guard: ")
        assert not any(part in message for part in ("127.0.0.1", "5301", "internal", "6379", PRIVATE, "u:p"))
        assert info.value.failure is Failure.REFUSED and info.value.fault(callers_endpoint=True) == "caller"
    assert server.dialled == []


def test_no_redirect_is_followed():
    server = FakeServer(answer(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:5301/\r\nContent-Length: 0\r\n\r\n"))
    response = guarded(server, "http://callbacks.example/cb", lambda h, p: [PUBLIC])
    assert response.status_code == 302 and server.dialled == [(PUBLIC, 80)]


def test_proxy_settings_from_the_environment_are_ignored(monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://proxy.invalid:3128")
    server = FakeServer(answer(b"HTTP/1.1 204 No Content\r\n\r\n"))
    guarded(server, "http://callbacks.example/cb", lambda h, p: [PUBLIC])
    assert server.dialled == [(PUBLIC, 80)]
    assert server.requests[0].startswith(b"POST /cb ")  # not the absolute-URI form a proxy gets


def tarpit(sock: socket.socket) -> None:
    """A status line, then one header every 0.2 s for a minute: no single read ever times out."""
    sock.sendall(b"HTTP/1.1 200 OK\r\n")
    for i in range(300):
        sock.sendall(f"X-Slow-{i}: drip\r\n".encode())
        time.sleep(0.2)


def test_the_deadline_ends_a_call_that_a_read_timeout_never_would(monkeypatch):
    server = FakeServer(tarpit)
    monkeypatch.setattr(transport, "system_resolver", lambda host, port: [PUBLIC])
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    with pytest.raises(TransientError) as info:  # a callback is idempotent: uncertain becomes transient
        http.call(
            "POST",
            "http://callbacks.example/cb",
            timeout=(5, 5),
            idempotent=True,
            deadline_s=1.0,
            max_body_bytes=100,
            guard=NOTHING,
        )
    assert info.value.failure is Failure.READ_TIMEOUT and "deadline" in str(info.value)
    assert info.value.fault(callers_endpoint=True) == "system"  # slow, not unreachable
    assert server.dialled == [(PUBLIC, 80)] and server.closed.wait(10)


def test_the_deadline_through_the_transport_shuts_the_socket_down():
    server = FakeServer(tarpit)
    with pytest.raises((transport.DeadlineExceeded, requests.ConnectionError)):
        guarded(server, "http://callbacks.example/cb", lambda h, p: [PUBLIC], deadline_s=1.0)
    assert server.closed.wait(10)  # the server saw the connection end, long before its minute


def test_a_deadline_after_sending_a_non_idempotent_call_is_uncertain(monkeypatch):
    server = FakeServer(tarpit)
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    with pytest.raises(UncertainError) as info:
        http.call(
            "POST", "http://vendor.example/jobs", timeout=(5, 5), idempotent=False, deadline_s=1.0, max_body_bytes=100
        )
    assert info.value.failure is Failure.READ_TIMEOUT


BIG = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 100_000


def test_a_body_over_the_cap_is_a_broken_contract_for_a_provider(monkeypatch):
    server = FakeServer(answer(BIG))
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    with pytest.raises(PermanentError) as info:
        http.call(
            "GET", "http://vendor.example/jobs/1", timeout=(5, 5), idempotent=True, deadline_s=10, max_body_bytes=1024
        )
    assert info.value.failure is Failure.BAD_RESPONSE and "1024" in str(info.value)


def test_a_callback_reads_only_the_first_bytes_of_a_large_answer():
    server = FakeServer(answer(BIG))
    response = guarded(server, "http://callbacks.example/cb", lambda h, p: [PUBLIC], max_body_bytes=100)
    assert response.status_code == 200 and response.content == b"x" * 100


def test_a_failed_status_with_a_large_body_is_classified_by_its_status(monkeypatch):
    server = FakeServer(answer(BIG.replace(b"200 OK", b"503 Service Unavailable")))
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    with pytest.raises(TransientError) as info:
        http.call(
            "GET", "http://vendor.example/jobs/1", timeout=(5, 5), idempotent=True, deadline_s=10, max_body_bytes=1024
        )
    assert info.value.status == 503


def test_a_provider_answer_within_the_cap_is_read_whole(monkeypatch):
    body = b'{"job_id": "j-1", "status": "queued"}'
    server = FakeServer(answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)))
    monkeypatch.setattr(transport.urllib3_connection, "create_connection", server.connector)
    response = http.call(
        "GET",
        "http://vendor.example/jobs/j-1",
        timeout=(5, 5),
        idempotent=True,
        deadline_s=10,
        max_body_bytes=len(body),
    )
    assert response.json() == {"job_id": "j-1", "status": "queued"}
    assert server.dialled == [("vendor.example", 80)]  # a provider is not guarded: urllib3 resolves it
