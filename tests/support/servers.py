"""Real HTTP servers for integration tests, on loopback, in daemon threads.

``ServerThread`` runs any WSGI app (the simulator, Liaison's web app, a ``CallbackRecorder``) so
tests talk to it over a real socket, with real timeouts and real concurrency::

    recorder = CallbackRecorder()
    with ServerThread(recorder) as hooks, ServerThread(create_app(cfg)) as vendor:
        requests.post(vendor.url + "/jobs", ...)
        recorder.wait_for(lambda reqs: len(reqs) == 2, timeout=5)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

#: how often serve_forever checks for shutdown; the default 0.5 s would make every stop() slow
_POLL_INTERVAL_S = 0.02


class ServerThread:
    """Serve ``app`` on ``127.0.0.1`` (port 0 = a free one) in a daemon thread, threaded."""

    def __init__(self, app: Callable[..., Any], host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash); only valid once started."""
        if self._server is None:
            raise RuntimeError("ServerThread is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def start(self) -> ServerThread:
        """Bind and serve; returns self so ``srv = ServerThread(app).start()`` reads well."""
        if self._server is not None:
            raise RuntimeError("ServerThread already started")
        self._server = make_server(self._host, self._port, self.app, threaded=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL_S},
            name=f"server-{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass(frozen=True)
class RecordedRequest:
    """One POST the recorder received, exactly as it arrived."""

    path: str
    headers: Mapping[str, str]  # keys lower-cased
    body: bytes  # raw, as needed for signature checks
    at: float  # time.time() on arrival
    status: int  # what the recorder answered

    def json(self) -> Any:
        return json.loads(self.body)


class CallbackRecorder:
    """A WSGI app that records every POST and answers with a scripted status.

    - ``set_status(path, 500)`` answers 500 on ``path`` from now on;
      ``set_status(path, [500, 500, 204])`` answers those in order, then the default again.
    - ``requests`` (a copy) / ``posts_to(path)`` / ``clear()`` read and reset the record.
    - ``wait_for(predicate, timeout)`` polls until ``predicate(requests)`` is true.
    - ``set_delay(path, seconds)`` answers every request on ``path`` that much later (a slow app).
    - ``hold(path, at_most_s)`` holds every request on ``path`` until the returned event is set (or
      ``at_most_s`` passed): an app that answers when the test says so, whatever the machine's pace.
    Anything but POST gets 405 and is not recorded.
    """

    def __init__(self, default_status: int = 204) -> None:
        self.default_status = default_status
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._fixed: dict[str, int] = {}
        self._scripted: dict[str, deque[int]] = {}
        self._delays: dict[str, float] = {}
        self._gates: dict[str, tuple[threading.Event, float]] = {}

    def set_status(self, path: str, status: int | Iterable[int]) -> None:
        """Answer ``status`` on ``path`` (a sequence is consumed one per request, then default)."""
        with self._lock:
            self._fixed.pop(path, None)
            self._scripted.pop(path, None)
            if isinstance(status, int):
                self._fixed[path] = status
            else:
                self._scripted[path] = deque(status)

    def set_delay(self, path: str, seconds: float) -> None:
        with self._lock:
            self._delays[path] = seconds

    def hold(self, path: str, at_most_s: float) -> threading.Event:
        gate = threading.Event()
        with self._lock:
            self._gates[path] = (gate, at_most_s)
        return gate

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def posts_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    def clear(self) -> None:
        """Forget recorded requests and scripted statuses."""
        with self._lock:
            self._requests.clear()
            self._fixed.clear()
            self._scripted.clear()
            self._delays.clear()
            gates, self._gates = list(self._gates.values()), {}
        for gate, _ in gates:
            gate.set()

    def wait_for(
        self,
        predicate: Callable[[list[RecordedRequest]], bool],
        timeout: float = 5.0,
        message: str = "",
        interval: float = 0.02,
    ) -> list[RecordedRequest]:
        """Poll until ``predicate(requests)`` holds; return that snapshot.

        Raises ``AssertionError`` on timeout, listing what did arrive so the failure explains
        itself.
        """
        deadline = time.monotonic() + timeout
        while True:
            snapshot = self.requests
            if predicate(snapshot):
                return snapshot
            if time.monotonic() >= deadline:
                seen = "\n".join(f"  {r.status} POST {r.path} {r.body[:200]!r}" for r in snapshot) or "  (none)"
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {message or 'predicate'}; "
                    f"{len(snapshot)} request(s) recorded:\n{seen}"
                )
            time.sleep(interval)

    def _status_for(self, path: str) -> int:
        with self._lock:
            queue = self._scripted.get(path)
            if queue:
                return queue.popleft()
            return self._fixed.get(path, self.default_status)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        if request.method != "POST":
            return Response(status=405)(environ, start_response)
        body = request.get_data()
        status = self._status_for(request.path)
        recorded = RecordedRequest(
            path=request.path,
            headers={key.lower(): value for key, value in request.headers.items()},
            body=body,
            at=time.time(),
            status=status,
        )
        with self._lock:
            self._requests.append(recorded)
            delay = self._delays.get(request.path, 0.0)
            gated = self._gates.get(request.path)
        if gated is not None:
            gated[0].wait(gated[1])
        if delay:
            time.sleep(delay)  # recorded on arrival: the order is the order requests came in
        return Response(status=status)(environ, start_response)
