"""A lean domain app for the end-to-end benchmark: receives callbacks, verifies every one with
``standardwebhooks``, counts them, answers 204 at once.

    python -m bench.lean_domain --port 5002 --secret whsec_...
    python -m bench.lean_domain --port 5002 --secret whsec_A... --secret whsec_B...   # two clients

POST (any path): ``standardwebhooks.Webhook(secret).verify(body, headers)``; a bad signature is
counted and answered 401 (the sender retries). Per correlation id it keeps, for ``task.completed``,
the distinct ``webhook-id``s seen (two distinct ids = completed twice), the number of deliveries
(more deliveries than ids = redeliveries of one message, which is at-least-once working, not a
double completion) and the arrival time of the first.

GET /progress → {"completed": <correlation ids with a task.completed>, "bad_signatures": n}
GET /report   → {"completed": {cid: [first_at, distinct_ids, deliveries, state]}, "types": {...}, ...}
GET /completed/<cid> → {"at": first_at, "state": state} of one correlation id, or 404 before it

Serving several clients (bench/fairness.py), it takes one ``--secret`` per client: a callback is
good when one of them verifies it. Correlation ids are counted as they come, whoever sent them:
clients that share it use ids of their own.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


class Tally:
    def __init__(self, secret: str, *more: str) -> None:
        self.webhooks = [Webhook(s) for s in (secret, *more)]
        self.lock = threading.Lock()
        self.first_at: dict[str, float] = {}
        self.ids: dict[str, set[str]] = {}
        self.deliveries: Counter[str] = Counter()
        self.types: Counter[str] = Counter()
        self.state: dict[str, str] = {}  # of the first task.completed
        self.bad = 0

    def verify(self, body: bytes, headers: dict[str, str]) -> Any:
        """The event, verified with the first secret that signed it (one, unless clients share us)."""
        for webhook in self.webhooks[:-1]:
            try:
                return webhook.verify(body, headers)
            except WebhookVerificationError:
                continue
        return self.webhooks[-1].verify(body, headers)

    def receive(self, body: bytes, headers: dict[str, str]) -> bool:
        try:
            event = self.verify(body, headers)
        except WebhookVerificationError:
            with self.lock:
                self.bad += 1
            return False
        now = time.time()
        kind = event.get("type", "?")
        with self.lock:
            self.types[kind] += 1
            if kind == "task.completed":
                cid = str(event.get("correlation_id"))
                self.first_at.setdefault(cid, now)
                self.ids.setdefault(cid, set()).add(headers["webhook-id"])
                self.deliveries[cid] += 1
                self.state.setdefault(cid, str(event.get("state")))
        return True

    def report(self) -> dict[str, Any]:
        with self.lock:
            completed = {
                cid: [at, len(self.ids[cid]), self.deliveries[cid], self.state[cid]]
                for cid, at in self.first_at.items()
            }
            return {"completed": completed, "types": dict(self.types), "bad_signatures": self.bad}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out as two writes: with Nagle's algorithm on, the body waits for the
    # client to ACK the head, which a kept-alive client delays by up to 40 ms (delayed ACK). Servers
    # in production set TCP_NODELAY (gunicorn does); so does this one.
    disable_nagle_algorithm = True
    tally: Tally

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        if data:
            self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {key.lower(): value for key, value in self.headers.items()}
        self._answer(204 if self.tally.receive(body, headers) else 401)

    def do_GET(self) -> None:
        if self.path == "/progress":
            with self.tally.lock:
                return self._answer(200, {"completed": len(self.tally.first_at), "bad_signatures": self.tally.bad})
        if self.path == "/report":
            return self._answer(200, self.tally.report())
        if self.path.startswith("/completed/"):
            cid = self.path.removeprefix("/completed/")
            with self.tally.lock:
                at, state = self.tally.first_at.get(cid), self.tally.state.get(cid)
            return self._answer(404) if at is None else self._answer(200, {"at": at, "state": state})
        return self._answer(404)


def main() -> None:
    parser = argparse.ArgumentParser(description="A lean domain app for bench/e2e.py: verifies and counts callbacks.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--secret", required=True, action="append", help="the whsec_ callback secret (repeat it: one per client)"
    )
    args = parser.parse_args()
    Handler.tally = Tally(*args.secret)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
