"""What a task's outbound calls and broker messages carry of its trace (foundation.tracing): the
stored traceparent while tracing is off, the current span's while it is on, nothing outside a task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core.trace_context import parse_traceparent
from foundation import tracing

STORED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def tracing_on() -> Iterator[None]:
    """The module's switch on for one test (no global provider is installed: the span is local)."""
    tracing.mark_enabled()
    try:
        yield
    finally:
        tracing.mark_enabled(False)


def test_off_a_task_forwards_its_stored_traceparent_as_it_is() -> None:
    assert tracing.message_headers() == {} and tracing.outbound_headers() == {}
    with tracing.continued(STORED, "liaison.test"):
        assert tracing.message_headers() == {"traceparent": STORED}
        assert tracing.outbound_headers() == {"traceparent": STORED}
        assert tracing.current_trace_id() == STORED.split("-")[1]
    assert tracing.message_headers() == {}


def test_off_an_invalid_traceparent_is_not_forwarded() -> None:
    with tracing.continued(None, "liaison.test"):
        assert tracing.message_headers() == {}


def test_on_a_message_carries_the_current_span_in_the_same_trace(tracing_on: None) -> None:
    tracer = TracerProvider().get_tracer("test")
    parent = tracing._propagator.extract({"traceparent": STORED})
    with tracer.start_as_current_span("liaison.test", context=parent) as span:
        header = tracing.message_headers()["traceparent"]
        sent = parse_traceparent(header)
        assert sent is not None and sent.trace_id == STORED.split("-")[1]
        assert sent.parent_id == f"{span.get_span_context().span_id:016x}", "the vendor's parent is this span"
        assert tracing.outbound_headers() == {}, "the requests instrumentation injects HTTP calls' own"
    assert not trace.get_current_span().get_span_context().is_valid
    assert tracing.message_headers() == {}


# --- issue 44: a task's seam is built from its own traceparent, never the ambient context -------

AMBIENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # tenant A's request


@pytest.fixture
def recorded(tracing_on: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Seams' spans recorded by a local provider (the global one stays the API's proxy)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing.trace, "get_tracer", provider.get_tracer)
    yield exporter


@contextmanager
def _ambient(traceparent: str) -> Iterator[None]:
    """Tenant A's request context: its span (remote) and its baggage, as Flask would have them."""
    ctx = tracing._propagator.extract({"traceparent": traceparent})
    token = otel_context.attach(baggage.set_baggage("tenantA-secret", "x", ctx))
    try:
        yield
    finally:
        otel_context.detach(token)


def test_on_a_seam_continues_its_task_not_the_ambient_trace_and_drops_its_baggage(
    recorded: InMemorySpanExporter,
) -> None:
    with _ambient(AMBIENT), tracing.continued(STORED, "liaison.submit attempt"):
        assert baggage.get_all() == {}, "nothing of the ambient context's baggage"
        sent = parse_traceparent(tracing.message_headers()["traceparent"])
        carrier: dict[str, str] = {}
        W3CBaggagePropagator().inject(carrier)
        assert carrier == {}
    (span,) = recorded.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == STORED.split("-")[1], "the task's trace"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == STORED.split("-")[2]
    assert sent is not None and sent.trace_id == STORED.split("-")[1]
    assert [f"{link.context.trace_id:032x}" for link in span.links] == [AMBIENT.split("-")[1]], "linked, not parented"


def test_on_a_task_without_a_traceparent_starts_a_trace_of_its_own(recorded: InMemorySpanExporter) -> None:
    with _ambient(AMBIENT), tracing.continued(None, "liaison.submit attempt"):
        assert baggage.get_all() == {}
    (span,) = recorded.get_finished_spans()
    assert span.parent is None and f"{span.context.trace_id:032x}" != AMBIENT.split("-")[1]


def test_on_detached_carries_nothing_of_the_context_it_was_entered_in(tracing_on: None) -> None:
    with _ambient(AMBIENT):
        with tracing.detached():
            assert baggage.get_all() == {} and not trace.get_current_span().get_span_context().is_valid
            assert tracing.message_headers() == {}
        assert baggage.get_all() == {"tenantA-secret": "x"}, "restored after the block"
