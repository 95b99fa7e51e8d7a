"""Flask wiring: per-request log context, request metrics, and the app's scrape-time collector."""

from __future__ import annotations

import re
import time
import uuid

from flask import Flask, Response, current_app, g, request, request_finished, request_started

from app.observability.collectors import BusinessCollector
from foundation import metrics
from foundation.logging import bind, clear

REQUEST_ID_HEADER = "X-Request-ID"
#: A caller's request id is echoed only if it is short and plain (it lands in every log line).
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_EXTENSION = "liaison.observability"


def init_app(app: Flask) -> None:
    """Call once ``app.extensions["liaison"]`` and ``["celery"]`` exist (end of ``create_app``)."""
    ctx = app.extensions["liaison"]
    metrics.register_providers(ctx.settings.providers)
    metrics.ensure_multiprocess_dir()
    app.extensions[_EXTENSION] = BusinessCollector(
        ctx.db, app.extensions["celery"], ctx.settings.providers, cache_s=ctx.settings.metrics_cache_s
    )
    request_started.connect(_on_request_started, app)
    request_finished.connect(_on_request_finished, app)
    app.after_request(_echo_request_id)


def business_collector(app: Flask | None = None) -> BusinessCollector:
    return (app or current_app).extensions[_EXTENSION]


def _on_request_started(_sender: Flask, **_: object) -> None:
    """Fresh context for this request: threads are reused, and nothing may leak between requests.
    A URL that names a task (``/api/v1/tasks/<correlation_id>``) binds it right away; views bind
    more (``bind(correlation_id=..., message_id=...)``) once they know it."""
    g.liaison_started = time.perf_counter()
    supplied = request.headers.get(REQUEST_ID_HEADER, "")
    g.request_id = supplied if _REQUEST_ID.fullmatch(supplied) else uuid.uuid4().hex
    clear()
    bind(
        request_id=g.request_id,
        method=request.method,
        path=request.path,
        correlation_id=(request.view_args or {}).get("correlation_id"),
    )


def _on_request_finished(_sender: Flask, response: Response, **_: object) -> None:
    started = g.get("liaison_started")
    elapsed = time.perf_counter() - started if started is not None else 0.0
    metrics.http_request(request.method, request.endpoint or "unmatched", response.status_code, elapsed)


def _echo_request_id(response: Response) -> Response:
    """The id in the response lets a caller quote it when asking what happened."""
    if "request_id" in g:
        response.headers[REQUEST_ID_HEADER] = g.request_id
    return response
