"""OpenTelemetry traces (issue 22), installed only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: an
SDK ``TracerProvider`` exporting over OTLP/HTTP in batches, and the maintained instrumentations --
Flask (the app), SQLAlchemy (the engine), Celery, requests and redis. Unset, nothing of the SDK is
imported, nothing is patched, and every call site costs one check (``foundation.tracing``).

The batch processor's thread does not survive a fork, so the provider is started in the process
that does the work, after any fork: a gunicorn worker (``post_fork`` in app/gunicorn_config.py), a prefork
Celery child (``worker_process_init``), a ``--pool threads`` worker's main process
(``worker_init``), beat (``beat_init``), a broker consumer's command. ``create_app`` registers its
Flask app and engine (:func:`register`); whatever is registered is instrumented when the provider
starts, or at once if it has already. Spans still buffered are flushed when the process ends
(``atexit``, ``worker_process_shutdown``, gunicorn's ``worker_exit``).

Service names: ``OTEL_SERVICE_NAME`` if set, else ``liaison-<process>``: web, worker, calls, relay
(the Procfile's Celery node names), beat, or the broker consumer's name.

What crosses a boundary is ours to decide, not a tenant's (issue 44):

- **Propagation is W3C ``traceparent`` (and its ``tracestate``) only**, whatever ``OTEL_PROPAGATORS``
  says: no ``baggage`` is read from a request or a Celery message, and none is sent to a vendor, a
  domain app or a broker. A tenant's baggage would otherwise ride along to the vendor, and onto
  another tenant's task released in its request.
- **Sampling is the operators'** (:func:`sampler`): ``OTEL_TRACES_SAMPLER``'s ``parentbased_*``
  follow a parent of this process only; a *remote* parent -- a caller's traceparent, a task's stored
  one -- is decided by the root rule, never by its ``sampled`` flag.
- **Spans are cleaned on export** (``app.observability.span_redaction``): URLs without query or
  userinfo, the logs' secret patterns masked.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import TYPE_CHECKING, Any

from celery.signals import beat_init, worker_init, worker_process_init, worker_process_shutdown
from flask import Flask

from foundation import tracing
from foundation.logging import get_logger
from foundation.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import Sampler
    from sqlalchemy.engine import Engine

log = get_logger(__name__)
_lock = threading.Lock()
_started: dict[int, TracerProvider] = {}  # pid -> its provider: a fork's child starts its own
_registered: list[tuple[Flask, Engine]] = []
_settings: Settings | None = None
_worker_name = "liaison-worker"  # set by worker_init (before a prefork pool forks its children)
#: Celery node names of the Procfile (``-n calls@%h``) and the service each is.
_NODES = {"worker": "liaison-worker", "calls": "liaison-calls", "relay": "liaison-relay"}


def configured(settings: Settings) -> bool:
    return bool(settings.otlp_endpoint)


def register(app: Flask, engine: Engine, settings: Settings) -> None:
    """From ``create_app``: instrument this app and engine when (or if) this process traces, and
    connect the Celery signals that start tracing in worker and beat processes."""
    global _settings
    if not configured(settings):
        return
    _settings = settings
    worker_init.connect(_on_worker_init, weak=False, dispatch_uid="liaison.tracing.worker_init")
    worker_process_init.connect(_on_child_init, weak=False, dispatch_uid="liaison.tracing.process_init")
    worker_process_shutdown.connect(_on_child_shutdown, weak=False, dispatch_uid="liaison.tracing.process_shutdown")
    beat_init.connect(_on_beat_init, weak=False, dispatch_uid="liaison.tracing.beat_init")
    with _lock:
        _registered.append((app, engine))
        running = os.getpid() in _started
    if running:
        _instrument_app(app, engine)


def start(settings: Settings, service: str) -> bool:
    """Install the provider and the instrumentations in this process (once per pid); False when
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is unset."""
    if not configured(settings):
        return False
    with _lock:
        if os.getpid() in _started:
            return True
        provider = _provider(settings, settings.otel_service_name or service)
        _started[os.getpid()] = provider
        registered = list(_registered)
    from opentelemetry import trace
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    trace.set_tracer_provider(provider)
    _propagate_traceparent_only()
    tracing.mark_enabled()
    for instrumentor in (CeleryInstrumentor(), RequestsInstrumentor(), RedisInstrumentor()):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=provider)
    for app, engine in registered:
        _instrument_app(app, engine)
    atexit.register(shutdown)
    log.info("tracing: spans go to %s as %s", settings.otlp_endpoint, settings.otel_service_name or service)
    return True


def _provider(settings: Settings, service: str) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from app.observability.span_redaction import RedactingExporter

    resource = Resource.create({SERVICE_NAME: service})
    provider = TracerProvider(resource=resource, sampler=sampler(settings))
    exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(RedactingExporter(exporter)))
    return provider


def sampler(settings: Settings) -> Sampler:
    """The sampler ``OTEL_TRACES_SAMPLER`` (and ``_ARG``, a ratio) names, with one change to the
    SDK's: a ``parentbased_*`` sampler follows a *local* parent's decision (a span of this process:
    one trace is recorded whole or not at all), but decides a span with a *remote* parent by its
    root rule, as if it had none. A remote parent's ``sampled`` flag is the caller's -- a tenant's
    submit, a task's stored traceparent -- and must neither hide our spans from operators (flag
    0) nor make us record everything (flag 1). The ratio rule decides on the trace id, so every
    process that works on one trace decides the same."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased

    name = settings.otel_traces_sampler
    rule = name.removeprefix("parentbased_")
    root: Sampler = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(rule) or TraceIdRatioBased(
        settings.otel_traces_sampler_arg
    )
    if not name.startswith("parentbased_"):
        return root
    return ParentBased(root, remote_parent_sampled=root, remote_parent_not_sampled=root)


def _propagate_traceparent_only() -> None:
    """The global propagator -- what Flask and Celery extract, what Celery and requests inject --
    is W3C Trace Context alone: never ``baggage``, whatever ``OTEL_PROPAGATORS`` says."""
    from opentelemetry.propagate import set_global_textmap
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    set_global_textmap(TraceContextTextMapPropagator())


#: Requests that make no span: probes and scrapes, and every token-url callback, whose path carries a
#: credential (``/webhooks/<provider>/t/<token>``) that span attributes would otherwise record.
EXCLUDED_URLS = "healthz,metrics,readyz,/webhooks/[^/]+/t/"


def _instrument_app(app: Flask, engine: Engine) -> None:
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    provider = _started.get(os.getpid())
    if getattr(app, "_is_instrumented_by_opentelemetry", False):
        return
    FlaskInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=EXCLUDED_URLS)
    SQLAlchemyInstrumentor().instrument(engine=engine, tracer_provider=provider, enable_commenter=False)


def shutdown() -> None:
    """Flush what is buffered and stop the exporter (this process's provider only)."""
    provider = _started.pop(os.getpid(), None)
    if provider is not None:
        provider.shutdown()


def _node_service(hostname: str | None) -> str:
    return _NODES.get((hostname or "").partition("@")[0], "liaison-worker")


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    """A worker's main process: a threads pool works here, so it traces here; a prefork pool's
    children trace instead (``worker_process_init``), under the service name found here."""
    global _worker_name
    _worker_name = _node_service(getattr(sender, "hostname", None))
    pool = getattr(sender, "pool_cls", "")
    name = pool if isinstance(pool, str) else f"{pool.__module__}.{pool.__qualname__}"
    if "thread" in name and _settings is not None:
        start(_settings, _worker_name)


def _on_child_init(**_: Any) -> None:
    if _settings is not None:
        start(_settings, _worker_name)


def _on_child_shutdown(**_: Any) -> None:
    shutdown()


def _on_beat_init(**_: Any) -> None:
    if _settings is not None:
        start(_settings, "liaison-beat")
