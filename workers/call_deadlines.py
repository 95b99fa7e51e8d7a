"""One outbound call's wall-clock deadline (:class:`Call`) and the one watchdog thread per process
that cuts the call's sockets when it passes.

Connect and read timeouts bound each wait, not the call: a server that sends one header every 2 s
never trips a 10 s read timeout. The watchdog shuts the call's sockets down at its deadline, so any
blocking read returns at once; ``Call.expired`` then tells the classifier that the deadline, not the
other side, ended it. Apart from ``workers.transport`` (which runs the call) and
``workers.connections`` (whose connections register their sockets with it), so neither imports the other
for it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time


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
