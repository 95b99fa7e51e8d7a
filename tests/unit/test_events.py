"""Inbound vendor events (webhooks.events.parse_event): plain data out, every problem a MalformedEvent."""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.states import EventType, State
from webhooks.events import InvalidJson, MalformedEvent, VendorEvent, parse_event, strict_loads


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


# --- valid events -------------------------------------------------------------------------


def test_accepted_event():
    event = parse_event(body(type="job.accepted", job_id="j-1"))
    assert event == VendorEvent(EventType.ACCEPTED, "j-1", None, None)
    assert event.target is State.ACCEPTED


def test_accepted_event_drops_any_status():
    """`status` means nothing on job.accepted; it is not carried along."""
    event = parse_event(body(type="job.accepted", job_id="j-1", status="failed"))
    assert event.status is None
    assert event.target is State.ACCEPTED


@pytest.mark.parametrize(
    ("status", "state"),
    [("succeeded", State.SUCCEEDED), ("failed", State.FAILED), ("canceled", State.CANCELED)],
)
def test_completed_event(status, state):
    event = parse_event(body(type="job.completed", job_id="j-1", status=status, outcome={"n": 1}))
    assert event == VendorEvent(EventType.COMPLETED, "j-1", status, {"n": 1})
    assert event.target is state


def test_completed_without_outcome():
    assert parse_event(body(type="job.completed", job_id="j", status="failed")).outcome is None


def test_dict_body_is_accepted_too():
    """Already-decoded JSON (a dict) parses like the bytes form."""
    raw = {"type": "job.accepted", "job_id": "j-1"}
    assert parse_event(raw) == parse_event(json.dumps(raw).encode())


def test_bytearray_body():
    # parse_event takes a bytearray too, though it is annotated bytes
    assert parse_event(cast(bytes, bytearray(body(type="job.accepted", job_id="j")))).job_id == "j"


def test_unknown_extra_fields_are_ignored():
    assert parse_event(body(type="job.accepted", job_id="j", extra=[1, 2])).job_id == "j"


def test_job_id_of_200_chars():
    assert parse_event(body(type="job.accepted", job_id="x" * 200)).job_id == "x" * 200


def test_as_payload_round_trips():
    event = parse_event(body(type="job.completed", job_id="j", status="succeeded", outcome={"a": [1]}))
    assert parse_event(event.as_payload()) == event
    assert event.as_payload() == {"type": "job.completed", "job_id": "j", "status": "succeeded", "outcome": {"a": [1]}}


# --- malformed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{", id="truncated"),
        pytest.param(b"{'type': 'job.accepted'}", id="single-quotes"),
        pytest.param(b"\xff\xfe\x00garbage", id="not-utf"),
        pytest.param(b"\x80\x81", id="invalid-utf8"),
        pytest.param(b"not json", id="text"),
    ],
)
def test_invalid_json(raw):
    with pytest.raises(MalformedEvent):
        parse_event(raw)


@pytest.mark.parametrize("raw", [b"[]", b"[{}]", b'"job.accepted"', b"42", b"null", b"true"])
def test_not_an_object(raw):
    with pytest.raises(MalformedEvent, match="object"):
        parse_event(raw)


@pytest.mark.parametrize("event_type", [None, "", "job.started", "JOB.ACCEPTED", "accepted", 1, [], {}])
def test_bad_type(event_type):
    with pytest.raises(MalformedEvent, match="type"):
        parse_event({"type": event_type, "job_id": "j"})


def test_missing_type():
    with pytest.raises(MalformedEvent, match="type"):
        parse_event(body(job_id="j"))


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="missing"),
        pytest.param({"job_id": None}, id="null"),
        pytest.param({"job_id": ""}, id="empty"),
        pytest.param({"job_id": "x" * 201}, id="too-long"),
        pytest.param({"job_id": 42}, id="number"),
        pytest.param({"job_id": ["j"]}, id="list"),
    ],
)
def test_bad_job_id(fields):
    with pytest.raises(MalformedEvent, match="job_id"):
        parse_event(body(type="job.accepted", **fields))


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="missing"),
        pytest.param({"status": None}, id="null"),
        pytest.param({"status": "done"}, id="unknown"),
        pytest.param({"status": "SUCCEEDED"}, id="upper-case"),
        pytest.param({"status": "accepted"}, id="not-final"),
        pytest.param({"status": 1}, id="number"),
    ],
)
def test_completed_bad_status(fields):
    with pytest.raises(MalformedEvent, match="status"):
        parse_event(body(type="job.completed", job_id="j", **fields))


@pytest.mark.parametrize("status", [[], ["succeeded"], {}])
def test_completed_unhashable_status(status):
    with pytest.raises(MalformedEvent, match="status"):
        parse_event(body(type="job.completed", job_id="j", status=status))


@pytest.mark.parametrize("outcome", [[], [1], "ok", 1, True, 1.5])
def test_outcome_not_an_object(outcome):
    with pytest.raises(MalformedEvent, match="outcome"):
        parse_event(body(type="job.completed", job_id="j", status="succeeded", outcome=outcome))


def test_malformed_event_is_a_value_error():
    """Callers may catch ValueError; the view maps MalformedEvent to 400."""
    assert issubclass(MalformedEvent, ValueError)


def test_deeply_nested_json_is_malformed():
    with pytest.raises(MalformedEvent):
        parse_event(b"[" * 100_000)


# --- strict JSON: what json.loads lets through but the database cannot store ---------------

UNSTORABLE = [
    pytest.param(b'{"n": ' + b"1" * 4301 + b"}", id="int-past-4300-digits"),
    pytest.param(b'{"n": NaN}', id="NaN"),
    pytest.param(b'{"n": Infinity}', id="Infinity"),
    pytest.param(b'{"n": -Infinity}', id="-Infinity"),
    pytest.param(b'{"n": 1e400}', id="float-overflows-to-inf"),
    pytest.param(b'{"n": -1e400}', id="float-overflows-to-minus-inf"),
    pytest.param(b'"\\ud800"', id="lone-surrogate"),
    pytest.param(b'{"a": ["x", "\\udfff"]}', id="lone-low-surrogate-in-list"),
    pytest.param(b'{"\\ud800": 1}', id="lone-surrogate-key"),
    pytest.param(b'{"a": "x\\u0000y"}', id="nul-in-string"),
    pytest.param(b'{"a\\u0000": 1}', id="nul-in-key"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-too-deeply"),
]


NESTED_100: list[Any] = functools.reduce(lambda inner, _: [inner], range(99), [])


@pytest.mark.parametrize("raw", UNSTORABLE)
def test_strict_loads_rejects_what_cannot_be_stored(raw):
    with pytest.raises(InvalidJson):
        strict_loads(raw)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        pytest.param(b'{"n": ' + b"1" * 4300 + b"}", {"n": int("1" * 4300)}, id="int-of-4300-digits"),
        pytest.param(b"[1.5, -0.0, 1e308, 1e-400]", [1.5, -0.0, 1e308, 0.0], id="finite-floats"),
        pytest.param(b'"\\ud83d\\ude00 \\u00e9"', "\U0001f600 \u00e9", id="surrogate-pair"),
        pytest.param(b'"NaN"', "NaN", id="NaN-as-a-string"),
        pytest.param(b"[" * 100 + b"]" * 100, NESTED_100, id="nested-100"),
    ],
)
def test_strict_loads_accepts_ordinary_json(raw, value):
    assert strict_loads(raw, max_depth=100) == value


def test_invalid_json_is_a_value_error():
    assert issubclass(InvalidJson, ValueError)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"type": "job.accepted", "job_id": "j", "n": ' + b"1" * 5000 + b"}", id="huge-int"),
        pytest.param(b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": NaN}}', id="NaN"),
        pytest.param(
            b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": -Infinity}}', id="-Infinity"
        ),
        pytest.param(
            b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": {"x": 1e999}}', id="overflow"
        ),
        pytest.param(b'{"type": "job.accepted", "job_id": "\\ud800"}', id="lone-surrogate-job-id"),
        pytest.param(b'{"type": "job.accepted", "job_id": "j\\u0000"}', id="nul-job-id"),
    ],
)
def test_unstorable_json_is_a_malformed_event(raw):
    with pytest.raises(MalformedEvent, match="not valid JSON"):
        parse_event(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=4,
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["job.accepted", "job.completed"]) | json_values,
            "job_id": st.text(max_size=8) | st.text("x", min_size=198, max_size=202) | json_values,
            "status": st.sampled_from(["succeeded", "failed", "canceled"])
            | st.none()
            | st.integers()
            | st.text(max_size=10),
            "outcome": json_values,
        },
    )
)
def test_parse_event_is_total(fields):
    """Any JSON object (status kept hashable; unhashable ones have their own test above): a
    VendorEvent or MalformedEvent."""
    try:
        event = parse_event(json.dumps(fields).encode())
    except MalformedEvent:
        return
    assert isinstance(event.job_id, str) and 0 < len(event.job_id) <= 200
    assert event.outcome is None or isinstance(event.outcome, dict)
    assert event.target in State


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash(raw):
    with contextlib.suppress(MalformedEvent):
        parse_event(raw)


awkward_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=3)
    | st.sampled_from(["\x00", "a\x00", "\ud800", "\udfff", "\ud83d\ude00"]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2) | st.just("\ud800"), c, max_size=3),
    max_leaves=5,
)


@given(awkward_values)
def test_strict_loads_returns_only_what_can_be_stored(value):
    """Whatever json.dumps writes (NaN, Infinity, lone surrogates, NUL included): InvalidJson, or a
    value that serialises as strict JSON in valid UTF-8 without NUL (what PostgreSQL's JSONB needs)."""
    try:
        parsed = strict_loads(json.dumps(value).encode())
    except InvalidJson:
        return
    json.dumps(parsed, allow_nan=False, ensure_ascii=False).encode("utf-8")
    assert not any("\x00" in text for text in _strings(parsed))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# --- job.progress -----------------------------------------------------------------------------


def test_progress_event_carries_a_percentage_and_or_a_message():
    from webhooks.events import Progress

    event = parse_event(body(type="job.progress", job_id="j-1", percent=42, message="rendering", status="failed"))
    assert event == VendorEvent(EventType.PROGRESS, "j-1", progress=Progress(42.0, "rendering"))
    assert parse_event(body(type="job.progress", job_id="j", percent=0)).progress == Progress(0.0, None)
    assert parse_event(body(type="job.progress", job_id="j", message="x")).progress == Progress(None, "x")
    assert parse_event(event.as_payload()) == event  # as stored for an orphan, and read back
    with pytest.raises(ValueError):
        _ = event.target  # progress asks for no state


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"percent": 101},
        {"percent": -1},
        {"percent": True},
        {"percent": "50"},
        {"message": ""},
        {"message": "x" * 501},
        {"message": "two\nlines"},
        {"message": 5},
    ],
)
def test_bad_progress_is_malformed(fields):
    with pytest.raises(MalformedEvent):
        parse_event(body(type="job.progress", job_id="j-1", **fields))
