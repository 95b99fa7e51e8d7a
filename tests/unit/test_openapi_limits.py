"""What the OpenAPI document says the server refuses, against the code that refuses it (issue 22):
a cursor the document allows is one the API takes and no other; no string in any request body may
hold U+0000 (``wire.bounded_json`` refuses such a body, keys included); a deadline is given as a
timeout or a time, not both; a cancel's key is bound to its task (409). So schemathesis's
``positive_data_acceptance`` finds nothing the document allows that the server refuses for its
form (tests/integration/test_conformance.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.contract import CALLBACK_URL, HTTP_URL, ORIGIN, ReplayFilter, validated
from app.api.openapi import document
from app.api.representation import CURSOR, CURSOR_OR_EMPTY, MAX_ID, decode_cursor, encode_cursor
from app.api.validation import is_http_url, parse_submit
from app.errors import BadRequest, ValidationFailed
from core.origins import BadOrigin, parse_origin
from core.outbound_guard import Refused, parse_target
from tests.unit.test_validation import NOW, PROVIDERS, errors_of, submit
from wire.bounded_json import InvalidJson, strict_loads

NOW_ISO = "2030-01-01T12:00:00+00:00"


def validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema 2020-12 validator of ``schema``, its ``#/components/…`` references resolved."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": document()["components"]})


def resolved(schema: dict[str, Any]) -> dict[str, Any]:
    """A body's schema, its ``$ref`` followed."""
    if "$ref" in schema:
        return document()["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def kinds(prop: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema names, its ``anyOf`` branches included."""
    found = {prop["type"]} if isinstance(prop.get("type"), str) else set(prop.get("type", []))
    for branch in prop.get("anyOf", []):
        found |= kinds(branch)
    return found


def bodies() -> list[tuple[str, dict[str, Any]]]:
    """(operation id, request body schema) of every operation that takes a body."""
    return [
        (op["operationId"], op["requestBody"]["content"]["application/json"]["schema"])
        for item in document()["paths"].values()
        for op in item.values()
        if "requestBody" in op
    ]


def test_the_list_cursor_is_documented_as_the_api_checks_it() -> None:
    (cursor,) = [p for p in document()["paths"]["/api/v1/tasks"]["get"]["parameters"] if p["name"] == "cursor"]
    assert cursor["schema"]["pattern"] == CURSOR_OR_EMPTY == f"^(?:{CURSOR.pattern[1:-1]})?$"


@given(st.integers(min_value=1, max_value=MAX_ID - 1))
def test_every_cursor_given_out_matches_the_documented_pattern(last_id: int) -> None:
    assert CURSOR.fullmatch(encode_cursor(last_id)) and decode_cursor(encode_cursor(last_id)) == last_id


@given(st.from_regex(CURSOR, fullmatch=True) | st.text(max_size=25) | st.from_regex(r"\At[0-9]{1,21}\Z"))
def test_a_cursor_is_taken_exactly_when_the_document_allows_it(cursor: str) -> None:
    allowed = validator({"type": "string", "pattern": CURSOR_OR_EMPTY}).is_valid(cursor) and cursor != ""
    try:
        decode_cursor(cursor)
        taken = True
    except BadRequest:
        taken = False
    assert taken == allowed, cursor


@pytest.mark.parametrize(("operation", "schema"), bodies(), ids=[name for name, _ in bodies()])
def test_no_request_body_may_hold_nul_in_a_string_or_a_key(operation: str, schema: dict[str, Any]) -> None:
    check = validator(schema)
    body = resolved(schema)
    for name, prop in body.get("properties", {}).items():
        if "string" in kinds(prop) and "enum" not in prop:
            assert not check.is_valid({name: "a\x00b"}), (operation, name)
    if body.get("additionalProperties") is not False:  # other members: anything storable
        assert not check.is_valid({"x\x00": 1}) and not check.is_valid({"extra": ["a\x00"]}), operation


@pytest.mark.parametrize("body", ['{"x": "a\\u0000b"}', '{"a\\u0000": 1}', '{"input": {"k": ["\\u0000"]}}'])
def test_the_server_refuses_a_body_with_nul_anywhere_before_reading_it(body: str) -> None:
    with pytest.raises(InvalidJson):  # the views' json_body: a 400
        strict_loads(body)


@pytest.mark.parametrize("nul", [{"note": "a\x00"}, {"a\x00": 1}, ["x", {"y": "\x00"}], "a\x00"])
def test_a_tasks_input_may_hold_no_nul_anywhere(nul: Any) -> None:
    check = validator({"$ref": "#/components/schemas/SubmitTask"})
    assert check.is_valid({"input": {"note": "fine", "deep": [{"k": "v"}, 1, 2.5, None, True]}})
    assert check.is_valid({"input": "a string"})
    assert not check.is_valid({"input": {"wrapped": nul}} if not isinstance(nul, str) else {"input": nul})


@pytest.mark.parametrize("name", ["acceptance", "execution"])
def test_a_deadline_is_a_timeout_or_a_time_never_both(name: str) -> None:
    check = validator({"$ref": "#/components/schemas/SubmitTask"})
    timeout, deadline = {f"{name}_timeout_s": 60}, {f"{name}_deadline": "2031-01-01T00:00:00Z"}
    assert check.is_valid({"input": {}, **timeout}) and check.is_valid({"input": {}, **deadline})
    assert not check.is_valid({"input": {}, **timeout, **deadline})
    with pytest.raises(ValidationFailed) as refused:
        parse_submit(
            {"input": {}, **timeout, **deadline},
            providers=PROVIDERS,
            default_provider="sim",
            client_callback_url="https://shop.example/cb",
            now=datetime.fromisoformat(NOW_ISO),
        )
    assert [e["field"] for e in refused.value.errors or []] == [f"{name}_deadline"]


def test_a_cancel_key_bound_to_another_task_is_documented_as_a_conflict() -> None:
    cancel = document()["paths"]["/api/v1/tasks/{correlation_id}/cancel"]["post"]
    (key,) = [p for p in cancel["parameters"] if p["name"] == "Idempotency-Key"]
    assert "409" in key["description"] and "409" in cancel["responses"]


@settings(max_examples=300)
@given(st.from_regex(HTTP_URL, fullmatch=True).filter(lambda u: len(u) <= 2000))
def test_every_url_the_document_allows_is_one_the_server_takes(url: str) -> None:
    assert is_http_url(url), url


@settings(max_examples=300)
@given(st.from_regex(ORIGIN["pattern"], fullmatch=True))
def test_every_origin_the_document_allows_is_one_the_server_takes(origin: str) -> None:
    assert parse_origin(origin), origin


@pytest.mark.parametrize("value", ["ftp://x", "http://", "https://user@shop.example", "http://a:65536", "http://a/p"])
def test_an_origin_the_server_refuses_the_document_refuses(value: str) -> None:
    with pytest.raises(BadOrigin):
        parse_origin(value)
    assert not validator(ORIGIN).is_valid(value)


@pytest.mark.parametrize("field", ["acceptance_timeout_s", "execution_timeout_s", "heartbeat_timeout_s", "priority"])
def test_a_whole_number_written_with_a_fraction_is_the_integer_the_document_calls_it(field: str) -> None:
    """JSON Schema's ``integer`` takes ``3.0``; so does the server, as 3 (not ``3.5``, ``"3"`` or ``true``)."""
    assert validator({"$ref": "#/components/schemas/SubmitTask"}).is_valid({"input": {}, field: 3.0})
    request = submit({"input": {}, field: 3.0})
    assert {
        "priority": request.priority,
        "heartbeat_timeout_s": request.heartbeat_timeout_s,
        "acceptance_timeout_s": request.acceptance_deadline
        and int((request.acceptance_deadline - NOW).total_seconds()),
        "execution_timeout_s": request.execution_deadline and int((request.execution_deadline - NOW).total_seconds()),
    }[field] == 3
    for value in (3.5, "3", True):
        assert field in {e["field"] for e in errors_of({"input": {}, field: value})}, value


@pytest.mark.parametrize("value", [5, 5.0, 5.5, True, "5", -0.0])
def test_an_admin_bodys_whole_numbers_take_the_same_forms(value: object) -> None:
    """``5`` and ``5.0`` are the whole number 5 (JSON Schema's ``integer``); ``5.5``, ``true`` and ``"5"`` are not."""
    if value in (5, 5.0) and not isinstance(value, bool):
        assert validated(ReplayFilter, {"limit": value}).limit == 5
    else:
        with pytest.raises(ValidationFailed) as refused:
            validated(ReplayFilter, {"limit": value, "older_than_s": value})
        assert {e["field"] for e in refused.value.errors or []} <= {"limit", "older_than_s"}


@settings(max_examples=300)
@given(st.from_regex(CALLBACK_URL, fullmatch=True).filter(lambda u: len(u) <= 2000))
def test_a_callback_url_the_document_allows_the_guard_refuses_only_for_a_documented_rule(url: str) -> None:
    """The document's form is the server's first check; the guard then refuses only a malformed
    host (a name over 253 characters, a last label that is a number but no IPv4 address, a bad IPv6
    literal) or port (0, past 65535): the field's description says so. Never for userinfo or a
    character: those the form refuses itself."""
    try:
        parse_target(url)
    except Refused as exc:
        assert exc.reason in ("malformed host", "malformed host or port"), (url, exc.reason)


@pytest.mark.parametrize("field", ["correlation_id", "callback_url", "concurrency_key", "priority"])
def test_a_null_optional_field_is_left_out_by_the_server_and_allowed_by_the_document(field: str) -> None:
    assert validator({"$ref": "#/components/schemas/SubmitTask"}).is_valid({"input": {}, field: None})
    submit({"input": {}, field: None})  # taken: the same as leaving it out


@pytest.mark.parametrize(("operation", "schema"), bodies(), ids=[name for name, _ in bodies()])
def test_a_body_with_required_members_is_itself_required(operation: str, schema: dict[str, Any]) -> None:
    """Without a body its required members are missing, which the server refuses (422)."""
    (op,) = [o for item in document()["paths"].values() for o in item.values() if o["operationId"] == operation]
    assert op["requestBody"]["required"] == bool(resolved(schema).get("required")), operation
