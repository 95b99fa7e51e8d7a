"""Task submission validation (app.api.validation): a body → SubmitRequest, or every problem at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.representation import MAX_ID, decode_cursor, encode_cursor
from app.api.validation import FIELDS, fingerprint, is_http_url, parse_submit, valid_idempotency_key
from app.errors import BadRequest, ValidationFailed
from foundation.provider_settings import ProviderSettings
from service.intake import SubmitRequest
from webhooks.signing import generate_secret

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
SIM = ProviderSettings(name="sim", kind="rest", base_url="http://x", webhook_secrets=(generate_secret(),))
SLOW = ProviderSettings(
    name="slow",
    kind="rest",
    base_url="http://y",
    webhook_secrets=(generate_secret(),),
    acceptance_timeout_s=60,
    execution_timeout_s=3600,
)
PROVIDERS = {"sim": SIM}


def submit(body, *, providers=PROVIDERS, default_provider="sim", client_callback_url="http://client/cb", now=NOW):
    return parse_submit(
        body,
        providers=providers,
        default_provider=default_provider,
        client_callback_url=client_callback_url,
        now=now,
    )


def errors_of(body, **kwargs) -> list[dict[str, str]]:
    with pytest.raises(ValidationFailed) as info:
        submit(body, **kwargs)
    assert info.value.status == 422
    return info.value.errors or []


def fields_of(body, **kwargs) -> set[str]:
    return {e["field"] for e in errors_of(body, **kwargs)}


# --- valid bodies -------------------------------------------------------------------------


def test_minimal_body():
    """Only `input`: default provider, client's callback, no deadlines, escalate on deadline."""
    result = submit({"input": {"x": 1}})
    assert isinstance(result, SubmitRequest)
    assert result.input == {"x": 1}
    assert result.provider == "sim"
    assert result.correlation_id is None
    assert result.callback_url is None  # the client's default applies later
    assert result.acceptance_deadline is None
    assert result.execution_deadline is None
    assert result.on_deadline == "escalate"
    assert result.fingerprint == fingerprint({"input": {"x": 1}})


def test_string_input_is_allowed():
    assert submit({"input": "hello"}).input == "hello"


def test_full_body():
    body = {
        "input": {"doc": "a"},
        "correlation_id": "order-42:v1@shop_a.b",
        "provider": "sim",
        "callback_url": "https://example.com/hooks?x=1",
        "acceptance_timeout_s": 60,
        "execution_deadline": "2025-06-01T15:00:00+02:00",
        "on_deadline": "cancel",
    }
    result = submit(body)
    assert result.correlation_id == "order-42:v1@shop_a.b"
    assert result.callback_url == "https://example.com/hooks?x=1"
    assert result.acceptance_deadline == NOW + timedelta(seconds=60)
    assert result.execution_deadline == datetime(2025, 6, 1, 13, 0, 0, tzinfo=UTC)
    assert result.execution_deadline.tzinfo is UTC
    assert result.on_deadline == "cancel"


def test_deadline_with_z_suffix():
    result = submit({"input": {}, "execution_deadline": "2025-06-02T00:00:00Z"})
    assert result.execution_deadline == datetime(2025, 6, 2, tzinfo=UTC)


def test_provider_defaults_apply_when_no_deadline_given():
    """A provider's default timeouts become deadlines relative to `now`."""
    result = submit({"input": {}, "provider": "slow"}, providers={"sim": SIM, "slow": SLOW}, default_provider=None)
    assert result.acceptance_deadline == NOW + timedelta(seconds=60)
    assert result.execution_deadline == NOW + timedelta(seconds=3600)


def test_explicit_timeout_overrides_provider_default():
    result = submit({"input": {}, "execution_timeout_s": 120}, providers={"slow": SLOW}, default_provider="slow")
    assert result.execution_deadline == NOW + timedelta(seconds=120)
    assert result.acceptance_deadline == NOW + timedelta(seconds=60)


def test_max_timeout_allowed():
    result = submit({"input": {}, "execution_timeout_s": 366 * 24 * 3600})
    assert result.execution_deadline == NOW + timedelta(days=366)


# --- input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="missing"),
        pytest.param({"input": None}, id="null"),
        pytest.param({"input": [1, 2]}, id="list"),
        pytest.param({"input": 5}, id="number"),
        pytest.param({"input": True}, id="bool"),
    ],
)
def test_bad_input(body):
    errors = errors_of(body)
    assert [e["field"] for e in errors] == ["input"]
    assert errors[0]["message"]


@pytest.mark.parametrize("body", [[], [{"input": {}}], "input", 5, None])
def test_body_not_an_object(body):
    """A body that is not a JSON object is a 422 too (no per-field list needed)."""
    with pytest.raises(ValidationFailed) as info:
        submit(body)
    assert info.value.status == 422


# --- unknown fields -----------------------------------------------------------------------


def test_unknown_fields_are_each_reported():
    errors = errors_of({"input": {}, "inputs": 1, "urgency": "high"})
    assert {"field": "inputs", "message": "unknown field"} in errors
    assert {"field": "urgency", "message": "unknown field"} in errors


# --- priority and concurrency_key (fair dispatch) -------------------------------------------


@pytest.mark.parametrize("priority", [0, 6, -1, 2.5, "1", True, None])
def test_priority_is_a_whole_number_from_1_to_5(priority):
    if priority is None:
        return  # absent and null both mean the client's default
    assert {"field": "priority", "message": "a whole number, 1 (most urgent) to 5"} in errors_of(
        {"input": {}, "priority": priority}
    )


@pytest.mark.parametrize("key", ["", "a b", "x" * 201, 7, "caf\u00e9"])
def test_a_concurrency_key_is_printable_ascii_without_spaces(key):
    errors = errors_of({"input": {}, "concurrency_key": key})
    assert [e["field"] for e in errors] == ["concurrency_key"]


# --- correlation_id -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["a/b", "a b", "x" * 201, "", "ü", "a\tb", "#1", 42, ["a"]],
)
def test_bad_correlation_id(value):
    assert fields_of({"input": {}, "correlation_id": value}) == {"correlation_id"}


@pytest.mark.parametrize("value", ["x" * 200, "a", "A.b_c:d@e-f", "0"])
def test_good_correlation_id(value):
    assert submit({"input": {}, "correlation_id": value}).correlation_id == value


@pytest.mark.parametrize("value", ["abc\n", "x" * 200 + "\n"])
def test_correlation_id_with_trailing_newline_is_rejected(value):
    assert fields_of({"input": {}, "correlation_id": value}) == {"correlation_id"}


# --- timeouts & deadlines -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["acceptance", "execution"])
def test_timeout_and_deadline_together(name):
    body = {"input": {}, f"{name}_timeout_s": 60, f"{name}_deadline": "2030-01-01T00:00:00Z"}
    assert f"{name}_deadline" in fields_of(body)


@pytest.mark.parametrize("name", ["acceptance_timeout_s", "execution_timeout_s"])
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 0.0, "60", None, 366 * 24 * 3600 + 1])
def test_bad_timeout(name, value):
    """Timeouts are whole seconds, 1 to 366 days; bools and fractions are not integers here (60.0 is
    one, as JSON Schema and the OpenAPI document count them: tests/unit/test_openapi_limits.py)."""
    assert fields_of({"input": {}, name: value}) == {name}


@pytest.mark.parametrize("name", ["acceptance_deadline", "execution_deadline"])
@pytest.mark.parametrize(
    "value",
    [
        pytest.param("2030-01-01T00:00:00", id="no-offset"),
        pytest.param("2030-01-01", id="date-only"),
        pytest.param("tomorrow", id="junk"),
        pytest.param("", id="empty"),
        pytest.param(1893456000, id="epoch-number"),
        pytest.param(None, id="null"),
        pytest.param("2025-06-01T11:59:59Z", id="past"),
        pytest.param("2025-06-01T12:00:00Z", id="exactly-now"),
        pytest.param("2025-06-01T13:00:00+02:00", id="past-in-other-zone"),
    ],
)
def test_bad_deadline(name, value):
    assert fields_of({"input": {}, name: value}) == {name}


def test_past_deadline_message():
    errors = errors_of({"input": {}, "execution_deadline": "2020-01-01T00:00:00Z"})
    assert errors == [{"field": "execution_deadline", "message": "must be in the future"}]


@pytest.mark.parametrize("name", ["acceptance_deadline", "execution_deadline"])
def test_deadline_beyond_datetime_range_is_a_field_error(name):
    assert name in fields_of({"input": {}, name: "9999-12-31T23:59:59-01:00"})


def test_acceptance_after_execution():
    body = {"input": {}, "acceptance_timeout_s": 7200, "execution_timeout_s": 3600}
    assert fields_of(body) == {"acceptance_deadline"}


def test_acceptance_equal_to_execution_is_fine():
    result = submit({"input": {}, "acceptance_timeout_s": 60, "execution_deadline": "2025-06-01T12:01:00Z"})
    assert result.acceptance_deadline == result.execution_deadline


def test_acceptance_after_provider_default_execution():
    """The ordering rule also applies against a provider's default deadline."""
    body = {"input": {}, "acceptance_timeout_s": 7200}
    assert fields_of(body, providers={"slow": SLOW}, default_provider="slow") == {"acceptance_deadline"}


# --- callback_url -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "ftp://x/y",
        "example.com/hook",
        "http://",
        "https:///path",
        "",
        "javascript:alert(1)",
        5,
        ["http://x"],
        "http://x/" + "a" * 2000,
    ],
)
def test_bad_callback_url(value):
    assert fields_of({"input": {}, "callback_url": value}) == {"callback_url"}


BROKEN_IPV6_URLS = ["http://[::1/x", "http://[::1", "https://::1]/x", "http://[/"]


@pytest.mark.parametrize("value", BROKEN_IPV6_URLS)
def test_broken_ipv6_callback_url_is_a_field_error(value):
    """urlsplit raises ValueError on an unbalanced bracket; that is a bad URL, not a crash."""
    assert fields_of({"input": {}, "callback_url": value}) == {"callback_url"}


@pytest.mark.parametrize("value", BROKEN_IPV6_URLS)
def test_is_http_url_is_false_for_broken_ipv6(value):
    assert is_http_url(value) is False


def test_is_http_url_accepts_a_real_ipv6_host():
    assert is_http_url("http://[::1]:8080/hook") is True


def test_callback_url_required_when_client_has_none():
    for client_callback_url in (None, ""):
        assert fields_of({"input": {}}, client_callback_url=client_callback_url) == {"callback_url"}
        assert fields_of({"input": {}, "callback_url": None}, client_callback_url=client_callback_url) == {
            "callback_url"
        }


def test_callback_url_given_when_client_has_none():
    result = submit({"input": {}, "callback_url": "http://cb.local:8080/x"}, client_callback_url=None)
    assert result.callback_url == "http://cb.local:8080/x"


# --- on_deadline & provider ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["Cancel", "ignore", "", None, 1, ["cancel"]])
def test_bad_on_deadline(value):
    assert fields_of({"input": {}, "on_deadline": value}) == {"on_deadline"}


@pytest.mark.parametrize("value", ["nope", "SIM", "", 3, None])
def test_unknown_provider(value):
    errors = errors_of({"input": {}, "provider": value})
    assert [e["field"] for e in errors] == ["provider"]


def test_unknown_provider_message_lists_configured():
    errors = errors_of({"input": {}, "provider": "nope"})
    assert "sim" in errors[0]["message"]


def test_provider_required_without_default():
    assert fields_of({"input": {}}, default_provider=None) == {"provider"}


def test_no_providers_configured():
    errors = errors_of({"input": {}}, providers={}, default_provider=None)
    message = "no provider is configured: the operator sets LIAISON_PROVIDERS"
    assert errors == [{"field": "provider", "message": message}]


def test_several_providers_and_no_default():
    errors = errors_of({"input": {}}, providers={"a": SIM, "b": SIM}, default_provider=None)
    assert errors == [{"field": "provider", "message": "required: more than one provider is configured"}]


@pytest.mark.parametrize("value", [[], ["sim"], {}, {"name": "sim"}])
def test_unhashable_provider_is_a_field_error(value):
    assert fields_of({"input": {}, "provider": value}) == {"provider"}


# --- all errors at once -------------------------------------------------------------------


def test_several_errors_reported_at_once():
    body = {
        "correlation_id": "bad id",
        "provider": "nope",
        "callback_url": "ftp://x",
        "on_deadline": "later",
        "acceptance_timeout_s": 0,
        "execution_timeout_s": 1,
        "execution_deadline": "2030-01-01T00:00:00Z",
        "colour": "blue",
    }
    assert fields_of(body) == {
        "colour",
        "input",
        "correlation_id",
        "provider",
        "callback_url",
        "on_deadline",
        "acceptance_timeout_s",
        "execution_deadline",
    }


def test_every_error_has_field_and_message():
    for error in errors_of({"input": None, "x": 1, "on_deadline": 2}):
        assert set(error) == {"field", "message"}
        assert isinstance(error["message"], str) and error["message"]


# --- fingerprint --------------------------------------------------------------------------


def test_fingerprint_stable_across_key_order():
    a = {"input": {"b": 1, "a": [1, {"y": 2, "x": 3}]}, "correlation_id": "c1"}
    b = {"correlation_id": "c1", "input": {"a": [1, {"x": 3, "y": 2}], "b": 1}}
    assert fingerprint(a) == fingerprint(b)
    assert submit(a).fingerprint == submit(b).fingerprint


def test_fingerprint_differs_for_different_bodies():
    assert fingerprint({"input": {"a": 1}}) != fingerprint({"input": {"a": 2}})
    assert fingerprint({"input": [1, 2]}) != fingerprint({"input": [2, 1]})
    assert fingerprint({"input": "é"}) != fingerprint({"input": "e"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=6,
)


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=5), st.integers(0, 2**32))
def test_fingerprint_ignores_key_order_property(body, seed):
    """Reordering the keys of a dict (recursively) never changes its fingerprint."""
    rnd = Random(seed)

    def shuffle(value):
        if isinstance(value, dict):
            items = list(value.items())
            rnd.shuffle(items)
            return {k: shuffle(v) for k, v in items}
        if isinstance(value, list):
            return [shuffle(v) for v in value]
        return value

    assert fingerprint(shuffle(body)) == fingerprint(body)


@given(
    st.dictionaries(
        st.sampled_from([*sorted(FIELDS - {"provider"}), "other"]),
        json_values
        | st.datetimes(max_value=datetime(9998, 12, 31), timezones=st.timezones()).map(lambda d: d.isoformat()),
        max_size=6,
    )
)
def test_parse_submit_is_total(body):
    """Any JSON-ish body: a SubmitRequest or ValidationFailed, never another exception.

    (`provider` is excluded and years stop at 9998: the unhashable-provider and year-9999
    overflow crashes are pinned by their own tests above.)
    """
    try:
        submit(body)
    except ValidationFailed as exc:
        assert exc.errors


# --- Idempotency-Key ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["k", "a" * 200, "order-42/retry#1", "!~", "Ab0=+/_.-"])
def test_valid_idempotency_key(value):
    assert valid_idempotency_key(value) == value


def test_missing_idempotency_key_is_none():
    assert valid_idempotency_key(None) is None


@pytest.mark.parametrize("value", ["", "a b", "a" * 201, "é", "tab\there", "\x7f", " lead"])
def test_invalid_idempotency_key(value):
    with pytest.raises(ValidationFailed) as info:
        valid_idempotency_key(value)
    assert info.value.status == 422
    assert info.value.errors is not None
    assert [e["field"] for e in info.value.errors] == ["Idempotency-Key"]


def test_idempotency_key_with_trailing_newline_is_invalid():
    with pytest.raises(ValidationFailed):
        valid_idempotency_key("k\n")


# --- list cursor (app.api.representation) -------------------------------------------------


@pytest.mark.parametrize("last_id", [1, 42, MAX_ID - 1])
def test_cursor_round_trips(last_id):
    assert decode_cursor(encode_cursor(last_id)) == last_id


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param(encode_cursor(0), id="zero"),
        pytest.param(encode_cursor(-5), id="negative"),
        pytest.param(encode_cursor(MAX_ID), id="2**62"),
        pytest.param(encode_cursor(10**30), id="overflows-bigint"),
        pytest.param(encode_cursor(int("9" * 4300)), id="4300-digits"),
        pytest.param("!!", id="not-base64"),
        pytest.param(encode_cursor(5)[1:], id="truncated"),
    ],
)
def test_cursor_out_of_range_or_garbled_is_400(cursor):
    with pytest.raises(BadRequest) as info:
        decode_cursor(cursor)
    assert info.value.status == 400


def test_priority_and_concurrency_key_are_carried_and_default_to_none():
    req = submit({"input": {}, "priority": 1, "concurrency_key": "account-42"})
    assert (req.priority, req.concurrency_key) == (1, "account-42")
    assert (submit({"input": {}}).priority, submit({"input": {}}).concurrency_key) == (None, None)
