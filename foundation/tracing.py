"""Continuing a task's trace (issue 22): the few seams where Liaison acts for a task it did not get
in a request of the task's own -- a vendor call, a webhook, a relay, a beat job -- start their span
with the task's stored ``traceparent`` as parent, since ambient context does not survive the
outbox (publish after commit, the sweep's republish minutes later).

**Never the ambient context** (issue 44): a seam's block runs in a context built from the task's own
traceparent and nothing else -- not the request, broker message or Celery task that happened to
release it. A commit in tenant A's request (or in a worker running A's task) may release tenant B's
queued task (fair dispatch); B's work must neither land in A's trace nor carry what A's context
holds (its ``baggage``, its ``tracestate``). The ambient span, if any, becomes a *link* of the
seam's span: an operator can still follow it, and nothing of it is propagated. Likewise the
outbox publishes its Celery messages :func:`detached` from whatever context the commit ran in.

Only the OpenTelemetry *API* here: the SDK, the exporter and the instrumentations are installed by
``app.observability.tracing``, and only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; it then calls
:func:`mark_enabled`. While tracing is off, :func:`continued` costs a context-variable set and
reset (no span, no tracer) and outbound calls forward the stored traceparent as it is, so the
vendor and the domain app still see their caller's trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.trace_context import format_traceparent, parse_traceparent, trace_id_of

__all__ = [
    "continued",
    "current_trace_id",
    "current_traceparent",
    "detached",
    "enabled",
    "mark_enabled",
    "message_headers",
    "outbound_headers",
    "task_context",
]

TRACER_NAME = "liaison"
_enabled = False
_propagator = TraceContextTextMapPropagator()
#: The traceparent of the task being worked on, while tracing is off (forwarded as it is).
_stored: ContextVar[str | None] = ContextVar("liaison_traceparent", default=None)


def mark_enabled(on: bool = True) -> None:
    """Called by ``app.observability.tracing`` once it has installed an SDK tracer provider."""
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


@contextmanager
def continued(traceparent: str | None, name: str, **attributes: Any) -> Iterator[None]:
    """The block runs in the task's trace: with tracing on, inside a span named ``name`` whose
    parent is the task's ``traceparent`` (a task without one: the root of a trace of its own), in a
    context holding that span and nothing else (no baggage, no tracestate, nothing of the ambient
    context, whose span is only linked); off, with the traceparent kept for
    :func:`outbound_headers` and the log lines' ``trace_id``. ``attributes`` become the span's
    ``liaison.<name>`` attributes (None values left out)."""
    if not _enabled:
        token = _stored.set(traceparent)
        try:
            yield
        finally:
            _stored.reset(token)
        return
    parent = task_context(traceparent)
    ambient = trace.get_current_span().get_span_context()
    links = [Link(ambient)] if ambient.is_valid else None
    tracer = trace.get_tracer(TRACER_NAME)
    values = {f"liaison.{k}": v for k, v in attributes.items() if v is not None}
    # attached first: the span is made current *in* this context (``start_as_current_span`` would
    # otherwise put it into the ambient one, whose baggage would go along)
    attached = otel_context.attach(parent)
    try:
        with tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=values, links=links):
            yield
    finally:
        otel_context.detach(attached)


def task_context(traceparent: str | None) -> Context:
    """A context built from a stored ``traceparent`` alone: its span as the (remote) parent, or an
    empty context when it is absent or invalid. Never derived from the current context."""
    if parse_traceparent(traceparent) is None:
        return Context()
    return _propagator.extract({"traceparent": traceparent or ""}, context=Context())


@contextmanager
def detached() -> Iterator[None]:
    """The block runs in an empty context (tracing on; off, as it is): what it publishes -- a
    Celery message of the outbox, whose headers the Celery instrumentation fills from the current
    context -- carries nothing of the request or task that committed it. The message's consumer
    continues the task's trace from its stored traceparent (:func:`continued`)."""
    if not _enabled:
        yield
        return
    token = otel_context.attach(Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def current_traceparent() -> str | None:
    """The traceparent to store with a task submitted now: the current span's (tracing on), else
    None (the caller stores the inbound header as received)."""
    if not _enabled:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format_traceparent(context.trace_id, context.span_id, int(context.trace_flags))


def outbound_headers() -> dict[str, str]:
    """Headers an outbound call adds: with tracing on none (the requests instrumentation injects
    the current span's), off the task's stored traceparent, if a seam bound one."""
    if _enabled:
        return {}
    stored = _stored.get()
    return {"traceparent": stored} if stored else {}


def message_headers() -> dict[str, str]:
    """Headers a broker message sent for a task carries (a channel event, an ``amqp`` provider's
    command), which no instrumentation injects: the current span's traceparent with tracing on,
    else the task's stored one, if a seam bound one."""
    if not _enabled:
        return outbound_headers()
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return {"traceparent": carrier["traceparent"]} if "traceparent" in carrier else {}


def current_trace_id() -> str | None:
    """The trace id for a log line: the current span's, or the task's stored trace while tracing is off."""
    if _enabled:
        context = trace.get_current_span().get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else None
    return trace_id_of(_stored.get())
