"""The socket side of one outbound HTTP call: a wall-clock deadline, a capped body, and (for a
client-supplied URL) a connection pinned to the address the outbound guard checked.

- **Deadline.** Connect and read timeouts bound each wait, not the call: a server that sends one
  header every 2 s never trips a 10 s read timeout. A watchdog timer shuts the call's socket down
  when the deadline passes, so any blocking read returns at once; ``Call.expired`` then tells the
  classifier that the deadline, not the other side, ended it.
- **Body cap.** The response is streamed and read up to ``max_body_bytes``; a larger body is never
  buffered (``BodyTooLarge``).
- **Pinning.** ``core.outbound_guard`` resolves the name once and checks every address; the
  connection goes to those checked addresses (never a second lookup, so DNS rebinding cannot
  switch it), while the Host header, TLS SNI and certificate check keep the URL's host name.
  Guarded calls follow no redirect and ignore proxy and netrc settings from the environment.

- **Kept connections.** A connection read to the end of its response is kept for the next call to
  that host (``workers.connections``), never across a fork, never between provider calls and
  calls to a client-supplied URL.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from typing import Any

import requests
from urllib3.util import connection as urllib3_connection

from core.outbound_guard import AllowList, IPAddress, Resolver, Target, parse_target, resolve
from workers import connections
from workers.connections import Connector

CHUNK_BYTES = 16 * 1024


class DeadlineExceeded(TimeoutError):
    """The call's wall-clock deadline passed (the watchdog shut its socket down)."""


class BodyTooLarge(Exception):
    """The response body is longer than the call's cap."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``getaddrinfo`` gives for ``host`` (IPv4 and IPv6, TCP)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


class _Watchdog:
    """One thread per process ends every call at its deadline (a timer thread per call cost a thread
    start on every outbound call). Calls that finish first are skipped when their time comes."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # the thread does not survive a fork

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Call]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, call: Call) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="liaison-call-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._due, (call.ends_at, next(self._seq), call))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                while not self._due or self._due[0][0] > now:
                    self._cond.wait(self._due[0][0] - now if self._due else None)
                    now = time.monotonic()
                _, _, call = heapq.heappop(self._due)
            if not call.finished:
                call.expire()


class Call:
    """One call's deadline and the sockets it opened (so the watchdog can cut them)."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.ends_at = time.monotonic() + deadline_s
        self.expired = False
        self.finished = False
        self.connected = False  # a socket was opened: the request may have been sent
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return max(0.0, self.ends_at - time.monotonic())

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            if self.expired:
                sock.close()
                raise TimeoutError("call deadline passed while connecting")
            self._sockets.append(sock)
            self.connected = True

    def expire(self) -> None:
        """The deadline passed: shut every socket down, so a blocked read returns now."""
        with self._lock:
            if self.finished:
                return
            self.expired = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):  # already closed or never connected
                    sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Call:
        _watchdog.watch(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self.finished = True  # a kept connection's socket is the next call's now


_watchdog = _Watchdog()


def _read_capped(response: requests.Response, max_body_bytes: int, truncate: bool) -> tuple[bytes, bool]:
    """At most ``max_body_bytes`` of the body, and whether that is all of it. Past the cap: the
    first bytes when ``truncate`` or when the status already failed the call (the status, not the
    body, is what is classified); otherwise ``BodyTooLarge``. The rest is never read: the
    connection is closed, not kept."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.raw.read(min(CHUNK_BYTES, max_body_bytes + 1 - size), decode_content=True)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if size > max_body_bytes:
            if truncate or not 200 <= response.status_code < 300:
                return b"".join(chunks)[:max_body_bytes], False
            raise BodyTooLarge(f"response body over {max_body_bytes} bytes")


def send(
    call: Call,
    method: str,
    url: str,
    *,
    timeout: tuple[float, float],
    max_body_bytes: int,
    truncate: bool = False,
    guard: AllowList | None = None,
    resolver: Resolver | None = None,
    connector: Connector | None = None,
    **kwargs: Any,
) -> requests.Response:
    """Send one request within ``call``'s deadline and return the response, its body read (capped:
    see ``_read_capped``; ``truncate`` for a caller that only needs the status).

    With ``guard`` (a client-supplied URL): the URL is parsed and resolved by the outbound guard,
    every address checked, and the connection pinned to them; raises ``outbound_guard.Refused``
    (and ``socket.gaierror`` when the name does not resolve). ``resolver`` and ``connector`` default
    to the system's (``system_resolver``, urllib3's ``create_connection``); unit tests pass stubs.
    """
    pinned: list[IPAddress] | None = None
    connector = connector or urllib3_connection.create_connection
    if guard is not None:
        target: Target = parse_target(url)
        pinned = resolve(target, guard, resolver or system_resolver)
        url = target.url
    connections.active.call, connections.active.pinned = call, pinned
    connections.active.connector = connector or urllib3_connection.create_connection
    try:
        headers = {"Accept-Encoding": "identity", **kwargs.pop("headers", {})}
        connect_s, read_s = timeout
        response = connections.session(guarded=guard is not None).request(
            method,
            url,
            timeout=(min(connect_s, call.deadline_s), read_s),
            allow_redirects=False,
            stream=True,
            headers=headers,
            **kwargs,
        )
        whole = False
        try:
            body, whole = _read_capped(response, max_body_bytes, truncate)
        finally:
            if whole and connections.KEEP_ALIVE_S > 0 and not call.expired:
                response.raw.release_conn()  # read to its end: the next call may use it
            else:
                response.close()
    finally:
        connections.active.call = connections.active.pinned = connections.active.connector = None
    if call.expired:
        # A socket shut down mid-headers or mid-body reads as a clean end of the message: a tarpit's
        # half-sent answer would pass for a whole one. Whatever was read, the deadline ended it.
        raise DeadlineExceeded(f"call deadline of {call.deadline_s:g}s passed")
    response._content = body  # requests' own slot for a read body: .content, .text and .json() use it
    response._content_consumed = True
    return response
