"""The fairness benchmark's tarpit (case 4 of bench/fairness.py): a callback endpoint on loopback
that takes a delivery's request and never finishes its answer, so the relay holding it waits on its
deadline. Apart from the cases because it is a server of its own, with its own threads."""

from __future__ import annotations

import select
import socket
import socketserver
import threading


class Tarpit(socketserver.ThreadingTCPServer):
    """A callback endpoint that never answers: it reads the request head, sends a status line, then
    one header line every ``interval_s`` and never the blank line that ends the head, until the
    caller hangs up. Counts the connections it accepted and the most it held at once."""

    daemon_threads = True

    def __init__(self, interval_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Trickle)
        self.interval_s = interval_s
        self.port = int(self.socket.getsockname()[1])
        self.lock = threading.Lock()
        self.accepted = self.held = self.most_held = 0
        self.closing = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def holding(self, change: int) -> None:
        with self.lock:
            self.accepted += change > 0
            self.held += change
            self.most_held = max(self.most_held, self.held)

    def close(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


class _Trickle(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        tarpit, conn = self.server, self.request
        assert isinstance(tarpit, Tarpit) and isinstance(conn, socket.socket)
        tarpit.holding(+1)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            line = 0
            while not tarpit.closing.is_set():
                if select.select([conn], [], [], tarpit.interval_s)[0]:
                    if not conn.recv(65536):
                        return  # the caller hung up
                    continue  # the rest of the request body: read and ignored
                conn.sendall(f"X-Drip-{line}: x\r\n".encode())
                line += 1
        except OSError:
            pass  # reset by the caller
        finally:
            tarpit.holding(-1)
