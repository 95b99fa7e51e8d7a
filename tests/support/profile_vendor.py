"""A loopback vendor that does NOT speak Liaison's shape: the API of docs/profiles/stripe-like.toml
(``POST /v1/jobs`` answering ``{"data": {"id": …, "state": "PENDING"}}``, ``GET /v1/jobs/<id>``,
``POST /v1/jobs/<id>/cancel``, ``GET /v1/jobs?reference=…``), for the ``http`` provider kind's tests.
Serve it with ``tests.support.servers.ServerThread``; it records every request as it arrived."""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from werkzeug.wrappers import Request, Response


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # as sent, still percent-encoded
    query: str
    headers: dict[str, str]
    body: Any


@dataclass
class ProfileVendor:
    #: the vendor's status name its status answers give (per job id; default ``state``)
    state: str = "RUNNING"
    states: dict[str, str] = field(default_factory=dict)
    #: a fixed HTTP status for every answer on a path (``/v1/jobs`` → 503)
    fail: dict[str, int] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)  # Idempotency-Key → job id
    #: submits whose answer is lost: the job is created, the answer held until this is set (or 5 s)
    lose_submits: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        raw_path = environ.get("RAW_URI", environ.get("REQUEST_URI", request.path)).split("?")[0]
        body = request.get_data()
        with self._lock:
            self.seen.append(
                Seen(
                    request.method,
                    raw_path,
                    environ.get("QUERY_STRING", ""),
                    dict(request.headers),
                    json.loads(body) if body else None,
                )
            )
            response = self._answer(request, raw_path, json.loads(body) if body else None)
            lose = request.method == "POST" and raw_path == "/v1/jobs" and self.lose_submits > 0
            self.lose_submits -= lose
        if lose:  # the caller's read timeout ends the call: it cannot know the job exists
            self.release.wait(5)
        return response(environ, start_response)

    def _answer(self, request: Request, path: str, body: Any) -> Response:
        if path in self.fail:
            return _json({"error": {"message": "nope"}}, self.fail[path])
        parts = path.split("/")
        if request.method == "POST" and path == "/v1/jobs":
            key = request.headers.get("Idempotency-Key") or body["metadata"]["reference"]
            job_id = self.jobs.setdefault(key, f"job_{next(self._ids)}")
            return _json({"data": {"id": job_id, "state": "PENDING"}})
        if request.method == "GET" and path == "/v1/jobs":
            reference = request.args.get("reference", "")
            found = [{"id": self.jobs[reference]}] if reference in self.jobs else []
            return _json({"data": found})
        if len(parts) == 4 and request.method == "GET":
            job_id = parts[3]
            state = self.states.get(job_id, self.state)
            return _json({"data": {"id": job_id, "state": state, "result": {"n": 1} if state == "DONE" else None}})
        if len(parts) == 5 and parts[4] == "cancel" and request.method == "POST":
            return _json({"data": {"id": parts[3], "state": "CANCELLED"}})
        return _json({"error": {"message": "no such route"}}, 404)


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status=status, content_type="application/json")
