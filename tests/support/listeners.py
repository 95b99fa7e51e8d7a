"""Raw TCP listeners on loopback: one that only counts who connects, a tarpit, and one that
records request lines.

``CountingListener`` proves that nothing reached a port (its ``count`` stays 0). ``Tarpit`` plays
a slow endpoint: it reads the request head, answers a status line, then one header every
``interval_s``; it records each connection, how many it holds at once, and whether the other side
closed it. ``LineRecorder`` answers ``200 {}`` and keeps each request's first line: what a proxy
or an origin was asked for.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Self


def read_head(conn: socket.socket) -> bytes | None:
    """A request's head (up to its blank line), or None when the client closed before it."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        head += chunk
    return head


class _Listener:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket()
        self._sock.bind((host, 0))
        self.host = host
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._count = 0
        self._open = 0
        self._max_open = 0
        self._running = True
        threading.Thread(target=self._accept, daemon=True, name=f"listener-{self.port}").start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def count(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return self._count

    @property
    def open(self) -> int:
        """Connections held right now."""
        with self._lock:
            return self._open

    @property
    def max_open(self) -> int:
        """The most connections held at once."""
        with self._lock:
            return self._max_open

    def _accept(self) -> None:
        while self._running:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._count += 1
                self._open += 1
                self._max_open = max(self._max_open, self._open)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        finally:
            with self._lock:
                self._open -= 1

    def handle(self, conn: socket.socket) -> None:
        conn.close()

    def close(self) -> None:
        self._running = False
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class CountingListener(_Listener):
    """Accepts, counts and closes every connection: anything that reaches it is counted."""


class Tarpit(_Listener):
    """Status line, then one header every ``interval_s`` (at most ``headers`` of them)."""

    def __init__(self, interval_s: float = 2.0, headers: int = 60) -> None:
        self.interval_s = interval_s
        self.headers = headers
        self._closed_by_peer = 0
        self._served_out = 0
        super().__init__()

    @property
    def closed_by_peer(self) -> int:
        """Connections the client closed before the tarpit ran out of headers."""
        with self._lock:
            return self._closed_by_peer

    @property
    def served_out(self) -> int:
        """Connections that lasted until the tarpit ran out of headers: nothing cut them off."""
        with self._lock:
            return self._served_out

    def handle(self, conn: socket.socket) -> None:
        with conn:
            if read_head(conn) is None:
                return
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                for i in range(self.headers):
                    if not self._running:
                        return  # the listener was closed: let the client go
                    readable, _, _ = select.select([conn], [], [], self.interval_s)
                    if readable and not conn.recv(65536):
                        break  # EOF: the client closed the connection
                    conn.sendall(f"X-Drip-{i}: x\r\n".encode())
                else:
                    with self._lock:
                        self._served_out += 1
                    return
            except OSError:
                pass  # reset or broken pipe: closed by the client
            with self._lock:
                self._closed_by_peer += 1


class LineRecorder(_Listener):
    """Answers every request ``200 {}`` and records its first line (``GET http://… HTTP/1.1`` when
    it was sent to a proxy, ``GET /path HTTP/1.1`` to the origin itself)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.lines: list[str] = []
        super().__init__(host)

    def handle(self, conn: socket.socket) -> None:
        with conn:
            head = read_head(conn)
            if head is None:
                return
            with self._lock:
                self.lines.append(head.split(b"\r\n", 1)[0].decode())
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
