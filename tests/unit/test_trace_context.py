"""core.trace_context: W3C traceparent parsing; anything invalid is absent, never an error."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.trace_context import (
    MAX_LENGTH,
    format_traceparent,
    parse_traceparent,
    trace_id_of,
    valid_traceparent,
)

HEX = "0123456789abcdef"
trace_ids = st.text(HEX, min_size=32, max_size=32).filter(lambda s: s != "0" * 32)
parent_ids = st.text(HEX, min_size=16, max_size=16).filter(lambda s: s != "0" * 16)
flags = st.integers(0, 255)

EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_recommendations_example() -> None:
    parsed = parse_traceparent(EXAMPLE)
    assert parsed is not None
    assert parsed.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert parsed.parent_id == "00f067aa0ba902b7"
    assert parsed.sampled
    assert parsed.header() == EXAMPLE
    assert trace_id_of(EXAMPLE) == parsed.trace_id


@given(trace_ids, parent_ids, flags)
def test_a_formatted_header_parses_back(trace_id: str, parent_id: str, flag: int) -> None:
    header = format_traceparent(trace_id, parent_id, flag)
    parsed = parse_traceparent(header)
    assert parsed is not None
    assert (parsed.trace_id, parsed.parent_id, parsed.flags) == (trace_id, parent_id, flag)
    assert valid_traceparent(header) == header


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1))
def test_ints_format_as_opentelemetry_holds_them(trace_id: int, span_id: int) -> None:
    parsed = parse_traceparent(format_traceparent(trace_id, span_id))
    assert parsed is not None
    assert int(parsed.trace_id, 16) == trace_id and int(parsed.parent_id, 16) == span_id


@given(st.text(max_size=200))
def test_anything_else_is_absent_or_valid_never_an_error(value: str) -> None:
    parsed = parse_traceparent(value)
    if parsed is not None:
        assert len(parsed.trace_id) == 32 and set(parsed.trace_id) <= set(HEX)
        assert parsed.trace_id != "0" * 32 and parsed.parent_id != "0" * 16


def test_invalid_headers_are_absent() -> None:
    t, p = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    for bad in (
        None,
        "",
        f"00-{'0' * 32}-{p}-01",  # all-zero trace id
        f"00-{t}-{'0' * 16}-01",  # all-zero parent id
        f"00-{t.upper()}-{p}-01",  # uppercase
        f"ff-{t}-{p}-01",  # forbidden version
        f"00-{t}-{p}-01-extra",  # version 00 has four fields
        f"00-{t[:-1]}-{p}-01",
        f"00-{t}-{p}-1",
        f"01-{t}-{p}-01-" + "x" * MAX_LENGTH,  # too long
    ):
        assert parse_traceparent(bad) is None, bad


def test_a_later_version_is_read_as_version_00() -> None:
    t, p = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    assert valid_traceparent(f"01-{t}-{p}-01-future") == f"00-{t}-{p}-01"
