"""The suite's own domain app: a small threaded HTTP server that verifies every callback's signature
(Standard Webhooks, through ``liaison_client.verify_callback``) and records, per correlation id, the
distinct ``webhook-id`` of each callback type and how often each id arrived.

``task.completed`` under two distinct webhook-ids is a task *completed twice* (two messages for one
completion); the same webhook-id arriving again is a *redelivery*, which Standard Webhooks allow and
a domain app skips by that id."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from liaison_client import CallbackVerificationError, verify_callback

COMPLETED = "task.completed"


@dataclass
class Received:
    """What one task's callbacks brought."""

    ids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # type -> webhook-ids
    deliveries: Counter[str] = field(default_factory=Counter)  # webhook-id -> arrivals
    state: str | None = None  # the state task.completed carried
    completed_at: float | None = None  # monotonic, first task.completed
    #: every arrival in order: (monotonic, type, sequence, webhook-id), for the order check
    arrivals: list[tuple[float, str, int | None, str]] = field(default_factory=list)


class DomainApp:
    """Listens on 127.0.0.1 (or ``address``: bin/cluster-sim's service host), on a free port bound at
    once so the port can go into LIAISON_OUTBOUND_ALLOW; answers 503 until :meth:`serve` gives it the
    client's secret."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.secret: str | None = None
        self.lock = threading.Lock()
        self.tasks: dict[str, Received] = defaultdict(Received)
        self.bad_signatures = 0
        self.callbacks = 0
        self.serving = False
        app = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(app.receive(dict(self.headers.items()), body))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the report counts what matters."""

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{address}:{self.port}/callbacks"

    def serve(self, secret: str) -> None:
        self.secret = secret
        self.serving = True
        threading.Thread(target=self.server.serve_forever, name="domain-app", daemon=True).start()

    def receive(self, headers: dict[str, str], body: bytes) -> int:
        if self.secret is None:
            return 503
        try:
            callback = verify_callback([self.secret], headers, body)
        except CallbackVerificationError:
            with self.lock:
                self.bad_signatures += 1
            return 401
        with self.lock:
            self.callbacks += 1
            got = self.tasks[callback.correlation_id]
            got.ids[callback.type].add(callback.message_id)
            got.deliveries[callback.message_id] += 1
            got.arrivals.append((time.monotonic(), callback.type, callback.sequence, callback.message_id))
            if callback.type == COMPLETED and got.completed_at is None:
                got.completed_at = time.monotonic()
                got.state = callback.state
        return 204

    def completed(self) -> set[str]:
        """Correlation ids that have had their task.completed."""
        with self.lock:
            return {cid for cid, got in self.tasks.items() if got.ids.get(COMPLETED)}

    def snapshot(self) -> dict[str, Received]:
        with self.lock:
            return dict(self.tasks)

    def close(self) -> None:
        if self.serving:  # shutdown() waits for serve_forever, which must have started
            self.server.shutdown()
        self.server.server_close()
