"""Failure classification (core.classify): which failures retry, whose fault they are, and
Retry-After parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.classify import (
    UNREACHABLE,
    Failure,
    Fault,
    Kind,
    classify_failure,
    classify_status,
    fault_of,
    parse_retry_after,
)
from core.errors import OutboundRefused, PermanentError, TransientError, UncertainError

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


# --- statuses -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_success_is_none(status):
    assert classify_status(status) is None


@pytest.mark.parametrize("status", [408, 425, 429, 500, 501, 502, 503, 504, 599])
def test_transient_statuses(status):
    """Timeouts, too-early, rate limits and every 5xx are worth another try."""
    assert classify_status(status) is Kind.TRANSIENT


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 451, 301, 304])
def test_permanent_statuses(status):
    """Any other 4xx (and an unexpected redirect) will fail the same way again."""
    assert classify_status(status) is Kind.PERMANENT


@given(st.integers(100, 599))
def test_every_status_has_exactly_one_answer(status):
    kind = classify_status(status)
    if 200 <= status < 300:
        assert kind is None
    elif status in (408, 425, 429) or status >= 500:
        assert kind is Kind.TRANSIENT
    else:
        assert kind is Kind.PERMANENT


# --- transport failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (Failure.CONNECT_ERROR, Kind.TRANSIENT),
        (Failure.CONNECT_TIMEOUT, Kind.TRANSIENT),
        (Failure.READ_TIMEOUT, Kind.UNCERTAIN),
        (Failure.RESET_AFTER_SEND, Kind.UNCERTAIN),
        (Failure.BAD_RESPONSE, Kind.PERMANENT),
        (Failure.REFUSED, Kind.PERMANENT),
    ],
)
def test_failure_labels(failure, kind):
    """Nothing sent → transient; sent but no answer → uncertain (may have acted); bad answer → permanent."""
    assert classify_failure(failure) is kind
    assert classify_failure(failure.value) is kind


def test_every_failure_label_is_classified():
    assert {classify_failure(f) for f in Failure} == set(Kind)


def test_unknown_failure_label_is_value_error():
    with pytest.raises(ValueError):
        classify_failure("dns_error")


# --- whose fault ------------------------------------------------------------------------


C, S = Fault.CALLER, Fault.SYSTEM


@pytest.mark.parametrize(
    ("kind", "status", "failure", "provider", "relay"),
    [
        # a provider or a domain app refusing the input it was given: the caller's
        (Kind.PERMANENT, 400, None, C, C),
        (Kind.PERMANENT, 404, None, C, C),
        (Kind.PERMANENT, 409, None, C, C),
        (Kind.PERMANENT, 410, None, C, C),
        (Kind.PERMANENT, 422, None, C, C),
        (Kind.PERMANENT, 451, None, C, C),
        # credentials: a provider refuses the ones we configured; a domain app checks secrets the caller registered
        (Kind.PERMANENT, 401, None, S, C),
        (Kind.PERMANENT, 403, None, S, C),
        # our own egress proxy wants credentials, whoever we were calling
        (Kind.PERMANENT, 407, None, S, S),
        # a redirect: a provider breaks the contract; a callback endpoint is misconfigured
        (Kind.PERMANENT, 301, None, S, C),
        (Kind.PERMANENT, 304, None, S, C),
        # an answer that breaks the contract, or our configuration (no status at all)
        (Kind.PERMANENT, None, Failure.BAD_RESPONSE, S, S),
        (Kind.PERMANENT, 200, Failure.BAD_RESPONSE, S, S),
        (Kind.PERMANENT, 404, Failure.BAD_RESPONSE, S, S),  # e.g. find refused: nothing of the caller's in it
        (Kind.PERMANENT, None, None, S, S),
        # down or slow for the whole retry budget: ours to watch
        (Kind.TRANSIENT, 429, None, S, S),
        (Kind.TRANSIENT, 503, None, S, S),
        # unreachable: a provider's outage is ours; a caller's endpoint that cannot be reached is the caller's
        (Kind.TRANSIENT, None, Failure.CONNECT_ERROR, S, C),
        (Kind.TRANSIENT, None, Failure.CONNECT_TIMEOUT, S, C),
        # the outbound guard refused the caller's URL: nothing was sent
        (Kind.PERMANENT, None, Failure.REFUSED, S, C),
        (Kind.UNCERTAIN, None, Failure.READ_TIMEOUT, S, S),
        (Kind.UNCERTAIN, None, Failure.RESET_AFTER_SEND, S, S),
    ],
)
def test_fault_table(kind, status, failure, provider, relay):
    assert fault_of(kind, status, failure) == provider
    assert fault_of(kind, status, failure, callers_endpoint=True) == relay


@given(st.integers(100, 599), st.sampled_from([None, *Failure]), st.booleans())
def test_only_a_permanent_refusal_is_ever_the_callers(status, failure, relay):
    """Whatever the status: an outage is never blamed on the caller (except that the caller's own
    endpoint cannot be reached), and a fault is one of the two."""
    for kind in Kind:
        fault = fault_of(kind, status, failure, callers_endpoint=relay)
        assert fault in (C, S)
        if fault == C and relay and failure in UNREACHABLE:
            continue  # the caller's endpoint cannot be reached, or the guard refuses it
        if fault == C:
            assert kind is Kind.PERMANENT and failure is not Failure.BAD_RESPONSE and status != 407


@pytest.mark.parametrize(
    ("error", "provider", "relay"),
    [
        (PermanentError("HTTP 422", status=422), C, C),
        (PermanentError("HTTP 401", status=401), S, C),
        (PermanentError("HTTP 403", status=403), S, C),
        (PermanentError("response is not JSON"), S, S),  # how the REST provider reports a broken contract
        (PermanentError("find: HTTP 400", status=400, failure=Failure.BAD_RESPONSE), S, S),
        (TransientError("HTTP 503", status=503), S, S),
        (UncertainError("read_timeout", failure=Failure.READ_TIMEOUT), S, S),
        (TransientError("connect_error", failure=Failure.CONNECT_ERROR), S, C),
        (TransientError("connect_timeout", failure=Failure.CONNECT_TIMEOUT), S, C),
        (OutboundRefused("refused by the outbound guard", failure=Failure.REFUSED), S, C),
    ],
)
def test_error_fault_is_fault_of_its_classification(error, provider, relay):
    """What the tasks call: the error carries its kind, status and failure label to ``fault_of``."""
    assert error.fault() == provider
    assert error.fault(callers_endpoint=True) == relay


# --- Retry-After --------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [("120", 120.0), ("0", 0.0), (" 30 ", 30.0), ("007", 7.0)])
def test_retry_after_delta_seconds(value, seconds):
    result = parse_retry_after(value, NOW)
    assert result == seconds
    assert isinstance(result, float)


def test_retry_after_http_date():
    value = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(value, NOW) == pytest.approx(90.0, abs=1.0)


def test_retry_after_http_date_other_offset():
    """A date with a numeric offset is the same instant as its GMT form."""
    when = (NOW + timedelta(seconds=600)).astimezone(timezone(timedelta(hours=2)))
    assert parse_retry_after(format_datetime(when), NOW) == pytest.approx(600.0, abs=1.0)


def test_retry_after_http_date_with_non_utc_now():
    now = NOW.astimezone(timezone(timedelta(hours=-5)))
    value = format_datetime(NOW + timedelta(seconds=45), usegmt=True)
    assert parse_retry_after(value, now) == pytest.approx(45.0, abs=1.0)


@pytest.mark.parametrize("seconds_ago", [1, 3600, 86400 * 365])
def test_retry_after_past_date_is_zero(seconds_ago):
    value = format_datetime(NOW - timedelta(seconds=seconds_ago), usegmt=True)
    assert parse_retry_after(value, NOW) == 0.0


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "soon",
        "-5",
        "1.5",
        "1e3",
        "12 34",
        "Mon, 99 Foo 2025 00:00:00 GMT",
        "Mon, 01 Jan 99999 00:00:00 GMT",
        "Wed, 01 Jan 2025 00:00:00 -0000",  # "-0000": no known zone → naive → refused
        "Wed, 01 Jan 2025 00:00:00",  # no zone at all
    ],
)
def test_retry_after_junk_is_none(value):
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize("value", ["²", "³", "¹", "1²"])
def test_retry_after_superscript_digits_are_junk(value):
    assert parse_retry_after(value, NOW) is None


@given(st.text(alphabet=st.characters(codec="ascii"), max_size=40))
def test_retry_after_is_total_on_ascii(value):
    """Any ASCII header value: a non-negative float or None, never an exception."""
    result = parse_retry_after(value, NOW)
    assert result is None or result >= 0.0
