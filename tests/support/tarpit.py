"""A loopback callback endpoint that never finishes its answer (a tarpit), counting connections.

It accepts, sends a status line, then one header every ``interval_s`` forever: read timeouts never
fire, because bytes keep coming. ``open`` is how many connections it holds now, ``max_open`` the most
it ever held at once, ``accepted`` how many it took in all.
"""

from __future__ import annotations

import socket
import threading


class Tarpit:
    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        self.open = 0
        self.max_open = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def start(self) -> Tarpit:
        thread = threading.Thread(target=self._accept, name="tarpit", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:  # the listening socket was closed by stop()
                return
            with self._lock:
                self.accepted += 1
                self.open += 1
                self.max_open = max(self.max_open, self.open)
            thread = threading.Thread(target=self._hold, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _hold(self, conn: socket.socket) -> None:
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            n = 0
            while not self._stop.wait(self.interval_s):
                n += 1
                conn.sendall(f"X-Tarpit-{n}: still here\r\n".encode())
        except OSError:
            pass  # the client gave up (closed or reset): that ends the hold, which the finally counts
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def stop(self) -> None:
        self._stop.set()
        self._server.close()
        for thread in self._threads:
            thread.join(timeout=10)
