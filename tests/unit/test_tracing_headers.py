"""What a task's outbound calls and broker messages carry of its trace (foundation.tracing): the
stored traceparent while tracing is off, the current span's while it is on, nothing outside a task."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

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
