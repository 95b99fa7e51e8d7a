"""The socket side of one outbound HTTP call: a wall-clock deadline, a capped body, and (for a
client-supplied URL) a connection pinned to the address the outbound guard checked.

- **Deadline.** The call runs inside a ``workers.call_deadlines.Call``: a watchdog shuts its sockets
  down when the wall-clock deadline passes, whatever each read's timeout says.
- **Body cap.** The response is streamed and read up to ``max_body_bytes``; a larger body is never
  buffered (``BodyTooLarge``).
- **Pinning.** ``core.outbound_guard`` resolves the name once and checks every address; the
  connection goes to those checked addresses (never a second lookup, so DNS rebinding cannot
  switch it), while the Host header, TLS SNI and certificate check keep the URL's host name.
  Guarded calls follow no redirect and ignore proxy and netrc settings from the environment.

- **Kept connections.** A connection read to the end of its response is kept for the next call to
  that host (``workers.connections``), never across a fork, never between provider calls and
  calls to a client-supplied URL.
- **Trace context.** A call made for a task carries its ``traceparent`` (``foundation.tracing``).
"""

from __future__ import annotations

import socket
from typing import Any

import requests
from urllib3.util import connection as urllib3_connection

from core.outbound_guard import AllowList, IPAddress, Resolver, Target, parse_target, resolve
from foundation import tracing
from workers import connections
from workers.call_deadlines import Call as Call  # the call's deadline, for callers of send()
from workers.connections import Connector

CHUNK_BYTES = 16 * 1024


class DeadlineExceeded(TimeoutError):
    """The call's wall-clock deadline passed (the watchdog shut its socket down)."""


class BodyTooLarge(Exception):
    """The response body is longer than the call's cap."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``getaddrinfo`` gives for ``host`` (IPv4 and IPv6, TCP)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


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
        # the task's traceparent while tracing is off (on, the requests instrumentation injects the span's)
        headers = {"Accept-Encoding": "identity", **tracing.outbound_headers(), **kwargs.pop("headers", {})}
        if guard is None:  # the operator's proxy, CA bundle and netrc, as the environment sets them
            kwargs = {**connections.environment_settings(url), **kwargs}
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
