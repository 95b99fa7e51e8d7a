"""The web process's gunicorn worker: gunicorn's threaded worker (``gthread``), except that a
request is read whole -- head and body -- by the worker's event loop before a thread gets it.

Why: ``gthread`` hands a connection to a thread as soon as its first byte arrives, and the thread
then reads the rest with a blocking socket and no deadline. Eight clients that send half a head
(slowloris) or a ``Content-Length`` and half a body held the shipped 2 × 4 threads, and /healthz,
submits and webhooks waited behind them. Here a connection waits in the poller, costing a socket and
its buffered bytes, until :class:`wire.http_framing.RequestFraming` says its request is whole; only
then does a thread run the app, on bytes already in memory: its parser reads from them and never
from the socket, so no thread ever waits on a client. Deadlines bound the wait itself: the head
within ``LIAISON_HEADER_READ_TIMEOUT_S`` of the connection (or of a kept-alive connection's next
byte), the body within ``LIAISON_BODY_READ_TIMEOUT_S`` of the head; past them the connection gets
408 and is closed (closed silently if it never sent a byte). A declared or sent body over
``LIAISON_MAX_BODY_BYTES`` gets 413 without being read, a head over gunicorn's header limits 431.
Open connections per worker are capped by gunicorn's ``worker_connections`` (default 1000).

Everything else is gunicorn's ``gthread``: the thread pool (``--threads``), keep-alive, the access
log, the hooks of app/gunicorn_config.py. Plain HTTP/1.1 only, as deployed: TLS ends before the web
process (the PaaS router), and HTTP/2 is not turned on.
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from gunicorn.http.unreader import Unreader
from gunicorn.workers.gthread import ThreadWorker

from wire.http_framing import RequestFraming, Verdict

#: Largest single read of the event loop.
RECV_BYTES = 64 * 1024
#: How long a closing connection may take to close its end (gunicorn's own linger).
LINGER_S = 2.0
#: File descriptors a worker keeps besides its connections (log files, pipes, the database pool).
SPARE_FDS = 128

_STATUS_LINES = {
    408: b"408 Request Timeout",
    413: b"413 Content Too Large",
    431: b"431 Request Header Fields Too Large",
}


class HeldBytes(Unreader):
    """The parser's source once a request was read ahead: the bytes held for it, and nothing
    from the socket (an empty read is the end of input, so a request that is not whole -- which
    the framing never hands over -- would end in a 400 or a closed connection, never a wait)."""

    def chunk(self, size_hint: int | None = None) -> bytes:
        return b""


@dataclass
class _Reading:
    framing: RequestFraming
    deadline: float
    in_body: bool = False  # the deadline is the body's


def head_limit(cfg: Any) -> int:
    """The largest head gunicorn's parser accepts with these limits (0 = gunicorn's maximum)."""
    line = cfg.limit_request_line if 0 < cfg.limit_request_line <= 8190 else 8190
    fields = cfg.limit_request_fields if 0 < cfg.limit_request_fields <= 32768 else 32768
    field = cfg.limit_request_field_size if cfg.limit_request_field_size > 0 else 8190
    return line + 2 + fields * (field + 2) + 4 + 2  # + one empty line before the request line


class ReadAheadWorker(ThreadWorker):
    """``gthread`` with requests read whole off-thread; see the module's docstring. The class
    attributes are the deploy's settings: :func:`worker_class` binds them."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = 262144

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[Any, _Reading] = {}
        self.held: dict[Any, bytes] = {}
        self.continued: set[Any] = set()
        self.lingering: dict[Any, float] = {}  # closing connections: when to stop waiting for their FIN
        self.max_head_bytes = head_limit(self.cfg)

    @classmethod
    def check_config(cls, cfg: Any, log: Any) -> None:
        super().check_config(cfg, log)
        if cfg.is_ssl or cfg.http2_cleartext not in (None, "off", ""):
            raise RuntimeError("the web worker serves plain HTTP/1.1: terminate TLS (and HTTP/2) before it")

    def init_process(self) -> None:
        raise_fd_limit(self.cfg.worker_connections + SPARE_FDS)
        super().init_process()

    # -- reading requests in the event loop ---------------------------------------------------

    def enqueue_req(self, conn: Any) -> None:
        """gthread's entry for a connection with (possibly) a request to serve: a new one, a
        kept-alive one that became readable, one with a pipelined request already read. Run the
        app only on a request held whole; read everything else ahead first."""
        held = self.held.pop(conn, None)
        if held is None:
            leftover = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
            self._read_ahead(conn, leftover)
            return
        future = self.tpool.submit(self._handle_held, conn, held)
        future.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _read_ahead(self, conn: Any, leftover: bytes) -> None:
        reading = _Reading(RequestFraming(self.max_head_bytes, self.max_body_bytes), 0.0)
        reading.deadline = time.monotonic() + self.header_timeout_s
        conn.sock.setblocking(False)
        if leftover:
            verdict = reading.framing.feed(leftover)
            if verdict is not Verdict.MORE:
                self._settle(conn, reading.framing, verdict)
                return
            self._more(conn, reading)
        self.reading[conn] = reading
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    def _on_readable(self, conn: Any, _sock: Any) -> None:
        reading = self.reading[conn]
        data = _receive(conn.sock)
        if data is None:
            return
        if not data:  # the client closed (or reset) the connection
            self._stop_reading(conn)
            self._close(conn)
            return
        verdict = reading.framing.feed(data)
        if verdict is Verdict.MORE:
            self._more(conn, reading)
            return
        self._stop_reading(conn)
        self._settle(conn, reading.framing, verdict)

    def _more(self, conn: Any, reading: _Reading) -> None:
        """Not whole yet: once the head is, the body's deadline applies (and a client that asked
        for it gets its ``100 Continue``)."""
        if reading.framing.in_body and not reading.in_body:
            reading.in_body = True
            reading.deadline = time.monotonic() + self.body_timeout_s
            if reading.framing.expect_continue:
                self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
                self.continued.add(conn)

    def _settle(self, conn: Any, framing: RequestFraming, verdict: Verdict) -> None:
        if verdict is Verdict.READY:
            self.held[conn] = bytes(framing.buffer)
            self.enqueue_req(conn)
        else:
            self._refuse(conn, 431 if verdict is Verdict.HEAD_TOO_LARGE else 413)

    def _stop_reading(self, conn: Any) -> None:
        if self.reading.pop(conn, None) is not None:
            self.poller.unregister(conn.sock)

    def murder_pending(self) -> None:
        """Run every loop turn (at least once a second): connections past their read deadline
        get 408 and are closed; a stopping worker closes those that have not sent a whole head."""
        super().murder_pending()
        now = time.monotonic()
        for conn, reading in list(self.reading.items()):
            if reading.deadline <= now or (not self.alive and not reading.framing.in_body):
                self._stop_reading(conn)
                if reading.framing.buffer:
                    self._refuse(conn, 408)
                else:
                    self._close(conn)
        for conn, deadline in list(self.lingering.items()):
            if deadline <= now:
                self._stop_lingering(conn)

    # -- closing after a response, in the event loop ---------------------------------------------

    def finish_request(self, conn: Any, fs: Any) -> None:
        """gthread closes a connection it will not keep alive "gracefully" (RFC 9112 section 9.6:
        FIN, then read until the client closes, for up to 2 s) -- blocking, in the event loop,
        where a client that never closes would stall every other connection. That wait happens in
        the poller here instead."""
        if not fs.cancelled() and fs.exception() is None and fs.result() is False:
            self._linger(conn)
            return
        super().finish_request(conn, fs)

    def _linger(self, conn: Any) -> None:
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_lingering, conn))
        except (OSError, ValueError):  # the socket is gone already
            self._close(conn)
            return
        self.lingering[conn] = time.monotonic() + LINGER_S

    def _on_lingering(self, conn: Any, _sock: Any) -> None:
        if _receive(conn.sock) == b"":
            self._stop_lingering(conn)

    def _stop_lingering(self, conn: Any) -> None:
        if self.lingering.pop(conn, None) is not None:
            self.poller.unregister(conn.sock)
            self._close(conn)

    # -- in a thread ----------------------------------------------------------------------------

    def _handle_held(self, conn: Any, held: bytes) -> Any:
        """gthread's ``handle`` on a request held whole: its parser reads the held bytes only."""
        conn.data_ready = True  # no wait for a first byte: the bytes are here
        if conn.initialized is False:
            conn.init()  # the HTTP/1.1 parser, on the socket
            conn.parser.unreader = HeldBytes()  # ...reading from the held bytes instead
        conn.parser.unreader.unread(held)
        return self.handle(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        if conn in self.continued:  # 100 Continue went out already; gunicorn would send another
            self.continued.discard(conn)
            req._expected_100_continue = False
        return super().handle_request(req, conn)

    # -- refusing and closing -------------------------------------------------------------------

    def _refuse(self, conn: Any, status: int) -> None:
        self.log.debug("Refused a request from %s: %d", conn.client, status)
        self._send(conn, b"HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % _STATUS_LINES[status])
        self._close(conn)

    @staticmethod
    def _send(conn: Any, data: bytes) -> None:
        """Best effort, never blocking: a short answer fits any socket's send buffer, and a client
        whose buffer is full is one we owe nothing."""
        with contextlib.suppress(OSError):
            conn.sock.send(data)

    def _close(self, conn: Any) -> None:
        self.continued.discard(conn)
        self.nr_conns -= 1
        conn.close()


def raise_fd_limit(wanted: int) -> None:
    """Lift this process's soft open-files limit to ``wanted`` if the hard limit allows, so that
    ``worker_connections`` sockets can be open at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def worker_class(*, header_timeout_s: float, body_timeout_s: float, max_body_bytes: int) -> type[ReadAheadWorker]:
    """The worker class with the deploy's settings (app/gunicorn_config.py's ``worker_class``)."""
    settings = {
        "header_timeout_s": header_timeout_s,
        "body_timeout_s": body_timeout_s,
        "max_body_bytes": max_body_bytes,
    }
    return cast("type[ReadAheadWorker]", type("ReadAheadWorker", (ReadAheadWorker,), settings))


def _receive(sock: socket.socket) -> bytes | None:
    """What a readable non-blocking socket holds: None when nothing after all (a spurious wake-up),
    ``b""`` when the client closed or reset the connection."""
    try:
        return sock.recv(RECV_BYTES)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""
