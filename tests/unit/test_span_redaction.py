"""What an exported span may say (issue 44, app.observability.span_redaction): URLs without query,
fragment or userinfo, the logs' secret patterns masked; and what the sampler and the propagator
leave to a caller (nothing: app.observability.tracing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import baggage, propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context
from sqlalchemy import create_engine, text

from app.observability import tracing as observability
from app.observability.span_redaction import RedactingExporter, clean_attributes, clean_text
from foundation.logging import REDACTED
from foundation.settings import Settings

TOKEN = "s3cr3t-t0ken-value"


def test_url_attributes_keep_scheme_host_port_and_path_only() -> None:
    cleaned = clean_attributes(
        {
            "http.url": f"https://user:pw@hooks.example.com:8443/cb/42?token={TOKEN}#frag",
            "url.full": f"http://127.0.0.1:5000/t?token={TOKEN}",
            "http.target": f"/api/v1/tasks/x?token={TOKEN}",
            "url.query": f"token={TOKEN}",
            "url.path": "/api/v1/tasks/x",
            "http.status_code": 204,
        }
    )
    assert cleaned == {
        "http.url": "https://hooks.example.com:8443/cb/42",
        "url.full": "http://127.0.0.1:5000/t",
        "http.target": "/api/v1/tasks/x",
        "url.path": "/api/v1/tasks/x",
        "http.status_code": 204,
    }


def test_text_loses_query_strings_of_urls_and_request_targets_and_the_logs_secrets() -> None:
    message = (
        f"HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /cb?token={TOKEN} "
        f"(Caused by NewConnectionError) posting to http://127.0.0.1:9/cb?token={TOKEN}, Bearer abc.def"
    )
    cleaned = clean_text(message)
    assert TOKEN not in cleaned and "abc.def" not in cleaned
    assert "url: /cb " in cleaned and "http://127.0.0.1:9/cb," in cleaned and "Bearer [redacted]" in cleaned


def test_secret_looking_keys_are_masked_whatever_they_hold() -> None:
    cleaned = clean_attributes(
        {"http.request.header.authorization": ("Bearer x",), "liaison.api_token": "plain", "db.statement": "SELECT 1"}
    )
    assert cleaned == {
        "http.request.header.authorization": (REDACTED,),
        "liaison.api_token": REDACTED,
        "db.statement": "SELECT 1",
    }


@given(
    path=st.from_regex(r"/[a-z0-9/]{0,20}", fullmatch=True),
    query=st.from_regex(r"[a-z]{1,8}=[A-Za-z0-9_-]{1,20}(&[a-z]{1,8}=[A-Za-z0-9_-]{1,20}){0,3}", fullmatch=True),
)
def test_no_url_attribute_keeps_its_query(path: str, query: str) -> None:
    for key in ("http.url", "url.full"):
        value = clean_attributes({key: f"http://127.0.0.1:8080{path}?{query}"})[key]
        assert value == f"http://127.0.0.1:8080{path}"
    assert clean_attributes({"http.target": f"{path}?{query}"})["http.target"] == path
    assert "?" not in clean_text(f"failed: http://127.0.0.1{path}?{query} and url: {path}?{query} (x)")


def test_the_exporter_cleans_span_and_event_attributes_before_the_inner_one_sees_them() -> None:
    inner = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingExporter(inner)))
    with provider.get_tracer("test").start_as_current_span("POST", attributes={"http.url": f"http://h/cb?t={TOKEN}"}):
        trace.get_current_span().add_event("exception", {"exception.message": f"url: /cb?t={TOKEN} refused"})
    (span,) = inner.get_finished_spans()
    assert span.attributes == {"http.url": "http://h/cb"}
    assert span.events[0].attributes == {"exception.message": "url: /cb refused"}


def test_sqlalchemy_statements_carry_placeholders_never_bound_values() -> None:
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = create_engine("sqlite://")
    SQLAlchemyInstrumentor().instrument(engine=engine, tracer_provider=provider, enable_commenter=False)
    with engine.connect() as conn:
        conn.execute(text("SELECT :value AS v"), {"value": TOKEN}).all()
    spans = exporter.get_finished_spans()
    assert any("db.statement" in (s.attributes or {}) for s in spans)
    assert not [s for s in spans for v in (s.attributes or {}).values() if TOKEN in str(v)]


# --- sampling and propagation: the operators' decision, W3C traceparent only -------------------

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736


def _decision(settings: Settings, sampled: bool, remote: bool) -> Decision:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    parent = SpanContext(TRACE_ID, 0x00F067AA0BA902B7, is_remote=remote, trace_flags=flags)
    context = set_span_in_context(NonRecordingSpan(parent))
    return observability.sampler(settings).should_sample(context, TRACE_ID, "x").decision


@pytest.mark.parametrize("sampled", [True, False])
def test_a_remote_parents_sampled_flag_decides_nothing(sampled: bool) -> None:
    on = Settings.from_env({})
    off = Settings.from_env({"OTEL_TRACES_SAMPLER": "parentbased_always_off"})
    none = Settings.from_env({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"})
    assert on.otel_traces_sampler == "parentbased_always_on"
    assert _decision(on, sampled, remote=True) == Decision.RECORD_AND_SAMPLE
    assert _decision(off, sampled, remote=True) == Decision.DROP
    assert _decision(none, sampled, remote=True) == Decision.DROP


def test_a_local_parent_is_followed_so_a_trace_is_recorded_whole_or_not_at_all() -> None:
    on = Settings.from_env({})
    assert _decision(on, sampled=False, remote=False) == Decision.DROP
    assert _decision(on, sampled=True, remote=False) == Decision.RECORD_AND_SAMPLE


def test_the_sampler_ratio_is_a_fraction() -> None:
    from foundation.options import ConfigError

    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        Settings.from_env({"OTEL_TRACES_SAMPLER_ARG": "1.5"})


@pytest.fixture
def global_textmap() -> Iterator[None]:
    before = propagate.get_global_textmap()
    try:
        yield
    finally:
        propagate.set_global_textmap(before)


def test_the_global_propagator_reads_and_writes_traceparent_and_never_baggage(global_textmap: None) -> None:
    propagate.set_global_textmap(CompositePropagator([]))  # whatever OTEL_PROPAGATORS made it
    observability._propagate_traceparent_only()
    inbound = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "baggage": "tenantA-secret=x",
    }
    extracted = propagate.extract(inbound)
    assert baggage.get_all(extracted) == {}
    assert trace.get_current_span(extracted).get_span_context().trace_id == TRACE_ID
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=baggage.set_baggage("tenantA-secret", "x", extracted))
    assert set(carrier) == {"traceparent"}
