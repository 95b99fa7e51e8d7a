"""The depth scanner, the size limit and their use at the edges (issue 8: poison input)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.validation import parse_submit
from app.errors import ValidationFailed
from foundation.provider_settings import ProviderSettings
from foundation.settings import ConfigError, Settings
from webhooks.events import EventTooLarge, MalformedEvent, parse_event
from wire.bounded_json import (
    InvalidJson,
    JsonLimits,
    TooDeep,
    TooLarge,
    check_bounds,
    nesting_depth,
    strict_loads,
    value_depth,
)


def true_depth(value: Any) -> int:
    """The oracle: plain recursion over the parsed value (test data stays shallow)."""
    if isinstance(value, dict):
        return 1 + max((true_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((true_depth(v) for v in value), default=0)
    return 0


#: Strings full of what could fool a scanner: brackets, quotes, backslashes, escapes.
TRICKY = st.lists(st.sampled_from([*list('[]{}"\\/ abc\n\té\u2028'), "\\u005b", '\\"']), max_size=12).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TRICKY,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TRICKY, children, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300)
@given(JSON_VALUES, st.booleans(), st.sampled_from([None, 1, "\t"]))
def test_scanned_depth_is_the_true_depth(value: Any, ascii_only: bool, indent: Any) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    assert nesting_depth(text) == true_depth(value) == value_depth(value)


@given(st.integers(min_value=0, max_value=300), st.sampled_from(["[]", "{}"]))
def test_depth_of_a_straight_nest(levels: int, kind: str) -> None:
    opening, closing = ("[" * levels, "]" * levels) if kind == "[]" else ('{"a":' * levels, "}" * levels)
    text = opening + "0" + closing
    assert nesting_depth(text) == levels


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('"[[[[{{{{"', 0),
        ('["\\"[[[", "]"]', 1),  # an escaped quote does not end the string
        ('["\\\\", [[]]]', 3),  # an escaped backslash does: the next quote ends it
        ('{"k[": {"v": "}}}"}}', 2),
        ('"\\u005b"', 0),
        ("7", 0),
        ("", 0),
    ],
)
def test_brackets_inside_strings_do_not_count(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


@pytest.mark.parametrize("depth", [960, 970, 100_000])
def test_any_depth_is_refused_before_parsing(depth: int) -> None:
    body = b'{"input": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(TooDeep) as refused:
        strict_loads(body, max_depth=33)
    assert refused.value.depth == depth + 1 and refused.value.limit == 33


def test_utf16_cannot_hide_brackets_from_the_scanner() -> None:
    """U+225B is the bytes 5B 22 in UTF-16-LE: ``[`` and ``"``. The text is scanned, not the bytes."""
    raw = json.dumps([[["\u225b"]]]).encode("utf-16")
    assert strict_loads(raw, max_depth=3) == [[["\u225b"]]]
    with pytest.raises(TooDeep):
        strict_loads(json.dumps([[[[1]]]]).encode("utf-16-le"), max_depth=3)


def test_the_depth_limit_has_a_ceiling_far_from_the_recursion_limit() -> None:
    with pytest.raises(TooDeep):
        strict_loads(b"[" * 500 + b"]" * 500, max_depth=10_000)


def test_too_deep_and_too_large_are_invalid_json() -> None:
    assert issubclass(TooDeep, InvalidJson) and issubclass(TooLarge, InvalidJson)


def test_size_is_counted_on_canonical_json() -> None:
    limits = JsonLimits(max_depth=32, max_bytes=20)
    check_bounds({"a": "éé"}, JsonLimits(32, 12), "input")  # {"a":"éé"}: 10 characters, 12 UTF-8 bytes
    with pytest.raises(TooLarge):
        check_bounds({"a": "éé"}, JsonLimits(32, 11), "input")
    check_bounds({"b": 1, "a": 2}, JsonLimits(32, len('{"a":2,"b":1}')), "input")  # no spaces counted
    with pytest.raises(TooLarge) as refused:
        check_bounds({"a": "x" * 20}, limits, "input")
    assert refused.value.size == len('{"a":"' + "x" * 20 + '"}') and "input" in str(refused.value)
    check_bounds({"a": "x" * 11}, limits, "input")  # exactly 20 bytes: allowed


def test_depth_limit_of_a_value() -> None:
    limits = JsonLimits(max_depth=3, max_bytes=10_000)
    check_bounds({"a": [{"b": 1}]}, limits, "outcome")
    with pytest.raises(TooDeep, match="outcome is nested 4 levels"):
        check_bounds({"a": [{"b": [1]}]}, limits, "outcome")


# --- at the edges: the API's validation, vendor events, settings ---------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PROVIDERS = {"sim": ProviderSettings(name="sim", kind="rest", base_url="http://127.0.0.1:1", webhook_secrets=("x",))}


def _parse(body: dict[str, Any], limits: JsonLimits) -> Any:
    return parse_submit(
        body,
        providers=PROVIDERS,
        default_provider="sim",
        client_callback_url="http://127.0.0.1:2/cb",
        now=NOW,
        input_limits=limits,
    )


def nest(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_input_at_the_limit_is_accepted_and_one_past_is_a_field_error() -> None:
    limits = JsonLimits(max_depth=32, max_bytes=64 * 1024)
    assert _parse({"input": nest(32)}, limits).input == nest(32)
    with pytest.raises(ValidationFailed) as refused:
        _parse({"input": nest(33)}, limits)
    assert refused.value.errors is not None
    assert [e["field"] for e in refused.value.errors] == ["input"]
    assert "nested 33 levels" in refused.value.errors[0]["message"]


def test_input_past_the_size_limit_is_a_field_error() -> None:
    limits = JsonLimits(max_depth=32, max_bytes=1024)
    _parse({"input": "x" * 1000}, limits)
    with pytest.raises(ValidationFailed) as refused:
        _parse({"input": {"blob": "x" * 1024}, "correlation_id": "a b"}, limits)
    assert refused.value.errors is not None
    assert sorted(e["field"] for e in refused.value.errors) == ["correlation_id", "input"]
    assert "bytes of JSON" in next(e["message"] for e in refused.value.errors if e["field"] == "input")


def _event(outcome: Any) -> bytes:
    return json.dumps({"type": "job.completed", "job_id": "j", "status": "succeeded", "outcome": outcome}).encode()


def test_an_event_outcome_past_the_depth_limit_is_malformed_before_parsing() -> None:
    limits = JsonLimits(max_depth=32, max_bytes=64 * 1024)
    assert parse_event(_event(nest(32)), limits).outcome == nest(32)
    with pytest.raises(MalformedEvent, match="at most 32"):
        parse_event(_event(nest(33)), limits)
    deep = b'{"type": "job.completed", "job_id": "j", "status": "failed", "outcome": ' + b"[" * 100_000
    with pytest.raises(MalformedEvent):
        parse_event(deep, limits)


def test_an_event_outcome_past_the_size_limit_is_too_large() -> None:
    limits = JsonLimits(max_depth=32, max_bytes=100)
    parse_event(_event({"a": "x" * 80}), limits)
    with pytest.raises(EventTooLarge):
        parse_event(_event({"a": "x" * 100}), limits)
    assert issubclass(EventTooLarge, MalformedEvent)


def test_limit_settings_are_read_and_bounded() -> None:
    settings_ = Settings.from_env(
        {"LIAISON_MAX_JSON_DEPTH": "8", "LIAISON_MAX_INPUT_BYTES": "2048", "LIAISON_MAX_OUTCOME_BYTES": "4096"}
    )
    assert settings_.input_limits == JsonLimits(8, 2048) and settings_.outcome_limits == JsonLimits(8, 4096)
    assert Settings.from_env({}).input_limits == JsonLimits(32, 65536)
    with pytest.raises(ConfigError, match="LIAISON_MAX_JSON_DEPTH"):
        Settings.from_env({"LIAISON_MAX_JSON_DEPTH": "5000"})
    with pytest.raises(ConfigError, match="LIAISON_MAX_INPUT_BYTES"):
        Settings.from_env({"LIAISON_MAX_INPUT_BYTES": "lots"})
