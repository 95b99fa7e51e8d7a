"""A TCP proxy on loopback that a test can stop and start: "the broker is down" for one client
without stopping the broker every other test (and the worker) is using. It can also hold what
clients send (:meth:`TcpProxy.hold`): a request on its way, delayed as long as the test says."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from typing import cast


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._running = False
        self._passing = threading.Event()
        self._passing.set()
        #: set when a client's bytes arrived while held: the request is sent and waits in the proxy
        self.held = threading.Event()

    def hold(self) -> None:
        """Keep what clients send from now on in the proxy until :meth:`release`."""
        self.held.clear()
        self._passing.clear()

    def release(self) -> None:
        self._passing.set()

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener, self._running = listener, True
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut every open one, as a dead broker would."""
        self._running = False
        if self._listener is not None:
            # Wakes the thread blocked in accept(); close() alone leaves the socket listening.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while self._running:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select(timeout=1):
                    data = cast(socket.socket, key.fileobj).recv(65536)  # the two sockets registered above
                    if not data:
                        return
                    if key.fileobj is a and not self._passing.is_set():
                        self.held.set()
                        self._passing.wait()
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            with self._lock:
                for s in (a, b):
                    self._conns.discard(s)
                    s.close()
