"""A lean vendor for the end-to-end benchmark: the provider contract of docs/design.md §5, fast.

    python -m bench.lean_vendor --port 5001 --secret whsec_... [--accept-delay 0.2 --complete-delay 0.1]

POST /jobs (Idempotency-Key) → 202 {job_id, status}; the same key → the same job (200).
GET /jobs/<id>, GET /jobs?reference=, POST /jobs/<id>/cancel. After ``--accept-delay`` it sends a
signed ``job.accepted`` to the job's ``callback_url``, and ``--complete-delay`` later a signed
``job.completed`` (succeeded), exactly as the simulator does (compact JSON, Standard Webhooks
headers, ``msg_<hex>`` ids kept across re-sends). A non-2xx answer or a network error is re-sent
after 0.5, 1, 2, 4, 8 s, as a real vendor would: that is what lets the naive pipeline, which has no
late binding, catch a webhook that overtook its own record of the job id.

For bench/fairness.py it also keeps, per job, when its POST /jobs arrived and the job's input
(``GET /received`` → ``{"jobs": [[received_at, input], ...]}``, oldest first, ``received_at`` in
seconds since the epoch), counts the jobs open (received and not yet sent ``job.completed``) and
the most ever open at once (``open`` and ``max_open`` in ``GET /healthz``), and takes new delays
while it runs (``POST /settings {"accept_delay": s, "complete_delay": s, "answer_delay": s}``, any
of them; it also starts ``max_open`` again from the jobs open now, and answers the settings and
counts). ``answer_delay`` (0 at start) holds every POST /jobs that long before it is handled: a
slow vendor, at which the caller's submitting processes wait (the receipt time is the arrival).

Why not the simulator: it keeps every delivery for inspection and starts a thread per timer, which
at a thousand jobs a second would measure the simulator. One scheduler thread and a few sender
threads with keep-alive sessions keep the vendor's own cost small; its CPU is still reported.
"""

from __future__ import annotations

import argparse
import heapq
import json
import queue
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from webhooks.signing import sign

RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0)


class Vendor:
    def __init__(self, secret: str, accept_delay: float, complete_delay: float, senders: int) -> None:
        self.secret = secret
        self.accept_delay = accept_delay
        self.complete_delay = complete_delay
        self.answer_delay = 0.0
        self.lock = threading.Lock()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}
        self.due: list[tuple[float, int, str, str, int]] = []  # (at, seq, job_id, event, attempt)
        self.seq = 0
        self.resent = 0  # webhooks sent again after a non-2xx or a network error
        self.gave_up = 0
        self.open = 0  # jobs received and not yet sent job.completed
        self.max_open = 0
        self.wake = threading.Condition(self.lock)
        self.ready: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()
        threading.Thread(target=self._schedule, daemon=True).start()
        for _ in range(senders):
            threading.Thread(target=self._send, daemon=True).start()

    def submit(self, key: str, body: dict[str, Any], received_at: float | None = None) -> tuple[dict[str, Any], bool]:
        with self.lock:
            existing = self.by_key.get(key)
            if existing:
                return self.jobs[existing], False
            job_id = "job_" + uuid.uuid4().hex
            job = {
                "job_id": job_id,
                "status": "queued",
                "reference": body["reference"],
                "callback_url": body["callback_url"],
                "outcome": None,
                "received_at": received_at or time.time(),
                "input": body.get("input"),
                "ids": {"job.accepted": "msg_" + uuid.uuid4().hex, "job.completed": "msg_" + uuid.uuid4().hex},
            }
            self.jobs[job_id] = job
            self.by_key[key] = job_id
            self.open += 1
            self.max_open = max(self.max_open, self.open)
            self._later(self.accept_delay, job_id, "job.accepted", 0)
            return job, True

    def _later(self, delay: float, job_id: str, event: str, attempt: int) -> None:
        """Schedule one send (the lock is held)."""
        self.seq += 1
        heapq.heappush(self.due, (time.monotonic() + delay, self.seq, job_id, event, attempt))
        self.wake.notify()

    def _schedule(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                while self.due and self.due[0][0] <= now:
                    _, _, job_id, event, attempt = heapq.heappop(self.due)
                    self.ready.put((job_id, event, attempt))
                self.wake.wait(timeout=(self.due[0][0] - now) if self.due else None)

    def _send(self) -> None:
        session = requests.Session()
        while True:
            job_id, event, attempt = self.ready.get()
            with self.lock:
                job = self.jobs[job_id]
                if event == "job.accepted":
                    job["status"] = "running"
                    payload: dict[str, Any] = {"type": event, "job_id": job_id}
                else:
                    if job["status"] != "succeeded":  # once per job, whatever the re-sends
                        self.open -= 1
                    job["status"], job["outcome"] = "succeeded", {"result": "ok", "reference": job["reference"]}
                    payload = {"type": event, "job_id": job_id, "status": "succeeded", "outcome": job["outcome"]}
            body = json.dumps(payload, separators=(",", ":")).encode()
            headers = sign(self.secret, job["ids"][event], int(time.time()), body).as_dict()
            headers["Content-Type"] = "application/json"
            try:
                ok = session.post(job["callback_url"], data=body, headers=headers, timeout=10).status_code < 300
            except requests.RequestException:
                ok, session = False, requests.Session()
            with self.lock:
                if not ok and attempt < len(RETRY_S):
                    self.resent += 1
                    self._later(RETRY_S[attempt], job_id, event, attempt + 1)
                elif ok and event == "job.accepted":
                    self._later(self.complete_delay, job_id, "job.completed", 0)
                elif not ok:
                    self.gave_up += 1
                    print(f"vendor: gave up on {event} of {job_id}", file=sys.stderr, flush=True)

    def public(self, job: dict[str, Any]) -> dict[str, Any]:
        return {"job_id": job["job_id"], "status": job["status"], "outcome": job["outcome"]}

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        """New delays (``accept_delay``, ``complete_delay``: of the sends scheduled from now on;
        ``answer_delay``: of the POST /jobs arriving from now on); the most open at once is counted
        again from now. Returns the settings and counts."""
        with self.lock:
            self.accept_delay = float(changes.get("accept_delay", self.accept_delay))
            self.complete_delay = float(changes.get("complete_delay", self.complete_delay))
            self.answer_delay = float(changes.get("answer_delay", self.answer_delay))
            self.max_open = self.open
            return {
                "accept_delay": self.accept_delay,
                "complete_delay": self.complete_delay,
                "answer_delay": self.answer_delay,
                "open": self.open,
                "max_open": self.max_open,
            }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    # The head and the body go out as two writes: with Nagle's algorithm on, the body waits for the
    # client to ACK the head, which a kept-alive client delays by up to 40 ms (delayed ACK). Servers
    # in production set TCP_NODELAY (gunicorn does); so does this one.
    disable_nagle_algorithm = True
    vendor: Vendor

    def log_message(self, format: str, *args: Any) -> None:  # no access log: it would be our cost
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        parts = urlsplit(self.path).path.strip("/").split("/")
        if parts == ["jobs"]:
            arrived = time.time()
            if self.vendor.answer_delay:
                time.sleep(self.vendor.answer_delay)
            key = self.headers.get("Idempotency-Key", "")
            body = json.loads(raw or b"null")
            if not key or not isinstance(body, dict) or "reference" not in body or "callback_url" not in body:
                return self._answer(400, {"title": "Malformed job request"})
            job, created = self.vendor.submit(key, body, arrived)
            return self._answer(202 if created else 200, self.vendor.public(job))
        if len(parts) == 3 and parts[0] == "jobs" and parts[2] == "cancel":
            with self.vendor.lock:
                found = self.vendor.jobs.get(parts[1])
                if found is None:
                    return self._answer(404, {"title": "Unknown job"})
                if found["status"] in ("succeeded", "failed", "canceled"):
                    return self._answer(409, {"title": "Job already finished"})
                found["status"] = "canceled"
            return self._answer(202, {"job_id": parts[1], "status": "canceled"})
        if parts == ["settings"]:
            changes = json.loads(raw or b"{}")
            if not isinstance(changes, dict):
                return self._answer(400, {"title": "Send a JSON object"})
            return self._answer(200, self.vendor.configure(changes))
        return self._answer(404, {"title": "Not found"})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        with self.vendor.lock:
            if parts == ["healthz"]:
                counts = {"jobs": len(self.vendor.jobs), "resent": self.vendor.resent, "gave_up": self.vendor.gave_up}
                counts.update(open=self.vendor.open, max_open=self.vendor.max_open)
                return self._answer(200, {"status": "ok", **counts})
            if parts == ["received"]:
                received = [[j["received_at"], j["input"]] for j in self.vendor.jobs.values()]
                return self._answer(200, {"jobs": received})
            if parts == ["jobs"]:
                reference = parse_qs(url.query).get("reference", [""])[0]
                found = [self.vendor.public(j) for j in self.vendor.jobs.values() if j["reference"] == reference]
                return self._answer(200, {"jobs": found})
            if len(parts) == 2 and parts[0] == "jobs" and parts[1] in self.vendor.jobs:
                return self._answer(200, self.vendor.public(self.vendor.jobs[parts[1]]))
        return self._answer(404, {"title": "Unknown job"})


def main() -> None:
    parser = argparse.ArgumentParser(description="A lean vendor (docs/design.md §5) for bench/e2e.py.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True, help="whsec_ secret the webhooks are signed with")
    parser.add_argument("--accept-delay", type=float, default=0.2)
    parser.add_argument("--complete-delay", type=float, default=0.1)
    parser.add_argument("--senders", type=int, default=8, help="threads sending webhooks")
    args = parser.parse_args()
    Handler.vendor = Vendor(args.secret, args.accept_delay, args.complete_delay, args.senders)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
