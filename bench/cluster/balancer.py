"""The cluster's front door: a TCP load balancer on the service host, as an operator puts in front of
several web hosts. Each connection goes to the next Liaison host in turn; one that refuses or does not
answer within a second is skipped for the next. Both the driver's submits and the vendor's webhooks
(``LIAISON_PUBLIC_URL``) come in through it, so a host lost is a host the traffic goes around."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading

CONNECT_TIMEOUT_S = 1.0


class Balancer:
    def __init__(self, address: str, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self._turn = itertools.count()
        self.listener = socket.create_server((address, 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://{address}:{self.port}"
        self.skipped = 0  # connections a backend refused or let time out (the next one took them)
        self._closed = False
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        start = next(self._turn)
        for n in range(len(self.backends)):
            backend = self.backends[(start + n) % len(self.backends)]
            try:
                upstream = socket.create_connection(backend, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                self.skipped += 1
                continue
            upstream.settimeout(None)
            return upstream
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            client.close()  # every host down: the caller sees the connection closed and retries
            return
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def close(self) -> None:
        self._closed = True
        self.listener.close()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    """Copy until either side ends, then close both (the other direction's copy ends with them)."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
