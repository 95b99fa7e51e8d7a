"""A worker host serves its own metrics (issue 10), so web and workers may run on different hosts.

With ``LIAISON_WORKER_METRICS_PORT`` set, the *main* process of a ``celery worker`` -- not its
prefork children, not beat -- listens on ``LIAISON_WORKER_METRICS_ADDRESS:PORT`` once the worker is
ready (``worker_ready``: sent once, by the worker program only, after the pool has started) and
answers ``GET /metrics`` with :func:`foundation.metrics.render`: what every process of this host
wrote to its ``PROMETHEUS_MULTIPROC_DIR``. That is the web's ``/metrics`` without the business
gauges (those come from the database; the web reports them). Scrapes send the same
``Authorization: Bearer $LIAISON_METRICS_TOKEN``, checked by the web's own code
(:func:`app.auth.check_metrics_token`); the settings refuse a port without a token.

One listener per directory: a second worker of the same host (the Procfile's ``relay``) sharing the
directory and the port finds the port taken, logs it and works on -- its samples are in the
directory the first one serves. A metrics port never stops a worker.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery.signals import worker_process_init, worker_ready

from app.auth import check_metrics_token
from app.errors import ApiError, problem
from foundation import metrics
from foundation.settings import Settings

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
_server: WSGIServer | None = None  # this process's listener, once started


def connect() -> None:
    """Connect the receivers (once per process; ``app.celery_app`` calls it)."""
    worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="liaison.obs.worker_metrics")
    worker_process_init.connect(_close_in_child, weak=False, dispatch_uid="liaison.obs.worker_metrics_child")


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    """``sender`` is the worker's consumer; its Celery app knows the Flask app and so the settings."""
    flask_app = getattr(getattr(sender, "app", None), "flask_app", None)
    if flask_app is not None:
        start(flask_app.extensions["liaison"].settings)


def wsgi_app(token: str) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """``/metrics`` with the metrics token; anything else is a problem+json, as on the web."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            if environ.get("PATH_INFO") != "/metrics":
                return problem(404, "Not Found", "a worker serves /metrics only")(environ, start_response)
            check_metrics_token(environ.get("HTTP_AUTHORIZATION", ""), token)
        except ApiError as exc:
            return problem(exc.status, exc.title, exc.detail)(environ, start_response)
        start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE_LATEST)])
        return [metrics.render()]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the worker's shutdown


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = 10  # a client that sends nothing gives its thread back

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a line each on stderr."""


def start(settings: Settings) -> WSGIServer | None:
    """Listen (in a daemon thread) if a port is configured; once per process. None when off, or when
    the port is taken (logged: the worker carries on without it)."""
    global _server
    port, address = settings.worker_metrics_port, settings.worker_metrics_address
    if port is None or _server is not None:
        return _server
    if metrics.multiprocess_dir() is None:
        log.warning("worker metrics: PROMETHEUS_MULTIPROC_DIR is not set; prefork children's counts are missing")
    try:
        server = make_server(
            address,
            port,
            wsgi_app(settings.metrics_token),
            server_class=_Server6 if ":" in address else _Server,
            handler_class=_QuietHandler,
        )
    except OSError as exc:
        log.warning(
            "worker metrics: cannot listen on %s port %s (%s); this worker serves none. Another worker of "
            "this host sharing PROMETHEUS_MULTIPROC_DIR and the port serves its samples too.",
            address,
            port,
            exc.strerror or type(exc).__name__,
        )
        return None
    threading.Thread(target=server.serve_forever, name="liaison-worker-metrics", daemon=True).start()
    _server = server
    log.info("worker metrics on %s port %s, GET /metrics", address, port)
    return server


def _close_in_child(**_: Any) -> None:
    """A prefork child forked after the listener started (a replacement) inherits its socket but not
    its thread: close the copy, so a child outliving a killed worker cannot keep the port bound."""
    global _server
    if _server is not None:
        _server.socket.close()
        _server = None
