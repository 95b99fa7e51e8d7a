"""Structured logs: one format for structlog and stdlib, bound context, no secret ever rendered."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.logging import REDACTED, SECRET_VALUES, bind, clear, configure_logging, get_logger, redact

API_KEY = "lk_" + "A1b2C3d4" * 5
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("json", "DEBUG", stream=stream)
    clear()
    yield stream
    clear()
    configure_logging("console", "WARNING")


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_stdlib_and_structlog_lines_are_json_with_the_bound_context(json_lines: io.StringIO) -> None:
    bind(request_id="r1", correlation_id="order-42", ignored=None)
    logging.getLogger("celery.app.trace").info("Task %s succeeded", "liaison.relay", extra={"outbox_id": 7})
    get_logger("liaison.test").warning("relay delivered", status=204)

    first, second = _lines(json_lines)
    assert first["event"] == "Task liaison.relay succeeded"
    assert first["logger"] == "celery.app.trace" and first["level"] == "info"
    assert first["outbox_id"] == 7
    for line in (first, second):
        assert line["request_id"] == "r1" and line["correlation_id"] == "order-42"
        assert "ignored" not in line and "timestamp" in line
    assert second["status"] == 204 and second["level"] == "warning"


def test_secrets_are_redacted_by_key_and_by_value(json_lines: io.StringIO) -> None:
    log = logging.getLogger("liaison.test")
    log.warning(
        "calling with %s and %s",
        API_KEY,
        WEBHOOK_SECRET,
        extra={"api_key": "plain", "headers": {"Authorization": "Bearer abc.def", "webhook-id": "msg_1"}},
    )
    get_logger().error(
        "config",
        callback_secret="anything",
        url="postgresql://app:hunter2@db/liaison",
        signature_header="v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    )
    try:
        raise RuntimeError(f"upstream refused {API_KEY}")
    except RuntimeError:
        log.exception("failed")

    output = json_lines.getvalue()
    for secret in (API_KEY, WEBHOOK_SECRET, "plain", "abc.def", "anything", "hunter2", "K5oZfzN95Z9UVu1Es"):
        assert secret not in output
    first, second, third = _lines(json_lines)
    assert first["api_key"] == REDACTED
    assert first["headers"] == {"Authorization": REDACTED, "webhook-id": "msg_1"}
    assert second["url"] == f"postgresql://app:{REDACTED}@db/liaison"
    assert "RuntimeError: upstream refused" in third["exception"]


def test_console_format_redacts_tracebacks_too() -> None:
    stream = io.StringIO()
    configure_logging("console", "INFO", stream=stream)
    try:
        try:
            raise ValueError(WEBHOOK_SECRET)
        except ValueError:
            logging.getLogger("x").exception("boom")
    finally:
        configure_logging("console", "WARNING")
    assert "boom" in stream.getvalue() and "ValueError" in stream.getvalue()
    assert WEBHOOK_SECRET not in stream.getvalue()


def test_configuring_twice_replaces_the_handler(json_lines: io.StringIO) -> None:
    configure_logging("json", "INFO", stream=json_lines)
    logging.getLogger("x").info("once")
    assert len(_lines(json_lines)) == 1
    assert len(logging.getLogger().handlers) == 1


def test_redact_leaves_ordinary_values_alone() -> None:
    value = {"reason": "signature", "message_id": "msg_1", "items": ["bulk_upload", ("a", 1)], "token_count": 3}
    assert redact(value) == {
        "reason": "signature",
        "message_id": "msg_1",
        "items": ["bulk_upload", ("a", 1)],
        "token_count": REDACTED,
    }


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        configure_logging("xml", "INFO")


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://:s3cr3t-redis@cache.internal:6379/0", f"redis://:{REDACTED}@cache.internal:6379/0"),
        ("rediss://default:s3cr3t-redis@cache:6380", f"rediss://default:{REDACTED}@cache:6380"),
        ("amqp://liaison:s3cr3t-amqp@mq:5672//", f"amqp://liaison:{REDACTED}@mq:5672//"),
        ("postgresql://app:s3cr3t-pg@db/liaison", f"postgresql://app:{REDACTED}@db/liaison"),
        ("postgresql+psycopg://app:s3cr3t-pg@db:5432/liaison", f"postgresql+psycopg://app:{REDACTED}@db:5432/liaison"),
    ],
)
def test_broker_and_database_urls_are_redacted_anywhere_in_a_line(
    json_lines: io.StringIO, url: str, shown: str
) -> None:
    log = logging.getLogger("liaison.test")
    log.error("cannot connect to %s: refused", url, extra={"target": f"broker at {url} (retrying)"})
    try:
        raise ConnectionError(f"Error connecting to {url}.")
    except ConnectionError:
        log.exception("broker down")
    output = json_lines.getvalue()
    assert "s3cr3t" not in output
    first, second = _lines(json_lines)
    assert first["event"] == f"cannot connect to {shown}: refused"
    assert first["target"] == f"broker at {shown} (retrying)"
    assert shown in second["exception"]


_B64 = "abcXYZ019+/"
#: whole secrets of each kind SECRET_VALUES masks, near misses, and the text around them
_SECRETS = st.one_of(
    st.text(alphabet=_B64 + "=_-", min_size=1, max_size=12).map("whsec_".__add__),
    st.text(alphabet="abcXYZ019_-", min_size=14, max_size=24).map("lk_".__add__),
    st.tuples(st.sampled_from(["Bearer ", "bearer\t", "BEARER  "]), st.text(alphabet=_B64, min_size=1, max_size=8)).map(
        "".join
    ),
    st.text(alphabet=_B64, min_size=18, max_size=26).map("v1,".__add__),
    st.tuples(
        st.sampled_from(["amqp://", "redis://", "x://"]),
        st.sampled_from(["", "u", "me"]),
        st.just(":"),
        st.text(alphabet="pw9", min_size=1, max_size=4),
        st.just("@h"),
    ).map("".join),
)
_SECRETISH = st.lists(st.one_of(_SECRETS, st.sampled_from([" ", ",", "_", "a", "=", "/"])), max_size=6).map("".join)


@given(st.one_of(_SECRETISH, st.text(max_size=80)))
def test_the_quick_look_never_lets_a_secret_through(value: str) -> None:
    """``redact`` skips the substitutions when ``MAYBE_SECRET`` finds none of the pieces a secret
    pattern needs: with or without that look, every string comes out the same."""
    masked = value
    for pattern, replacement in SECRET_VALUES:
        masked = pattern.sub(replacement, masked)
    assert redact(value) == masked


class _VendorDown(Exception):
    """An exception whose message holds what a driver or a client library puts there: a URL with its
    password, an API key."""


def _secret_exception() -> _VendorDown:
    return _VendorDown(f"cannot reach amqp://liaison:s3cr3t-amqp@mq:5672// with {API_KEY}")


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_an_exception_object_is_redacted_wherever_it_is_logged(log_format: str) -> None:
    """An exception as a field's value, as the event itself, in a stdlib ``extra`` or a positional
    argument is shown as its text: the same redaction as every message. So are its traceback and
    ``exc_info`` given as the exception."""
    stream = io.StringIO()
    configure_logging(log_format, "INFO", stream=stream)
    try:
        exc = _secret_exception()
        log = get_logger("liaison.test")
        log.warning("publish failed", error=exc)
        log.warning(exc)  # type: ignore[arg-type]  # typed as str, done anyway (stdlib takes any object)
        log.warning("publish failed: %s", exc)
        logging.getLogger("liaison.std").warning("publish failed", extra={"error": exc})
        log.warning("publish failed", errors=[exc], by_kind={"amqp": exc})
        log.warning("publish failed", exc_info=exc)
        try:
            raise exc
        except _VendorDown:
            log.exception("publish failed")
    finally:
        configure_logging("console", "WARNING")
    output = stream.getvalue()
    assert "s3cr3t-amqp" not in output and API_KEY not in output
    assert output.count(f"amqp://liaison:{REDACTED}@mq:5672//") == 8, output  # once a line
    assert "_VendorDown" in output


def test_an_exception_field_keeps_its_text_in_json(json_lines: io.StringIO) -> None:
    get_logger("liaison.test").error("publish failed", error=_secret_exception(), attempt=2, ok=False, gone=None)
    (line,) = _lines(json_lines)
    assert line["error"] == f"_VendorDown('cannot reach amqp://liaison:{REDACTED}@mq:5672// with {REDACTED}')"
    assert line["attempt"] == 2 and line["ok"] is False and line["gone"] is None
