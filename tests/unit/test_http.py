"""One HTTP call (workers.http): requests' exceptions → failure labels, and error messages that
never carry a secret from the URL. No network: exceptions and responses are built by hand."""

from __future__ import annotations

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from core.classify import Failure
from core.errors import CallError, PermanentError, TransientError, UncertainError
from workers import http

SECRET_URL = "https://liaison:pa55w0rd@vendor.example:8443/jobs?api_key=k3y-in-query&x=1"
SECRETS = ("liaison", "pa55w0rd", "k3y-in-query", "api_key", "?")


def refused() -> MaxRetryError:
    """What urllib3 raises when nothing listens: the NewConnectionError is the pool's ``reason``."""
    # urllib3 wants the pool and the connection that failed; the labels need neither
    return MaxRetryError(None, "/jobs", NewConnectionError(None, "Failed to establish a new connection"))  # type: ignore[arg-type]


def refused_as_requests_raises_it() -> requests.ConnectionError:
    """Raised inside ``except MaxRetryError``, so the MaxRetryError is only its ``__context__``."""
    try:
        try:
            raise refused()
        except MaxRetryError:
            raise requests.ConnectionError("wrapped")  # noqa: B904 — the implicit context is the point
    except requests.ConnectionError as exc:
        return exc


# --- requests' exceptions → failure labels -------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (requests.ConnectTimeout("connect timed out"), Failure.CONNECT_TIMEOUT),
        (requests.ReadTimeout("read timed out"), Failure.READ_TIMEOUT),
        # refused / DNS: requests wraps urllib3's MaxRetryError, whose reason is a NewConnectionError
        (requests.ConnectionError(refused()), Failure.CONNECT_ERROR),
        (requests.ConnectionError(NewConnectionError(None, "refused")), Failure.CONNECT_ERROR),  # type: ignore[arg-type]  # no connection needed
        # dropped after the request may have left
        (
            requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104))),
            Failure.RESET_AFTER_SEND,
        ),
        (requests.ConnectionError("Connection aborted."), Failure.RESET_AFTER_SEND),
        (requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead"), Failure.RESET_AFTER_SEND),
        # the request never left
        (requests.exceptions.InvalidURL("Failed to parse: http://[::1"), Failure.CONNECT_ERROR),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_failure_of(exc, failure):
    assert http._failure_of(exc) is failure


def test_failure_of_follows_the_implicit_context():
    exc = refused_as_requests_raises_it()
    assert isinstance(exc.__context__, MaxRetryError)
    assert http._failure_of(exc) is Failure.CONNECT_ERROR


def test_failure_of_stops_on_a_cyclic_chain():
    a, b = requests.ConnectionError("a"), ProtocolError("b")
    a.__context__, b.__context__ = b, a
    assert http._failure_of(a) is Failure.RESET_AFTER_SEND


# --- messages never carry a secret ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "target"),
    [
        (SECRET_URL, "vendor.example:8443"),
        ("http://user@vendor.example/jobs", "vendor.example"),
        ("https://Vendor.Example/jobs/1?token=t", "vendor.example"),
        ("http://[::1]:5001/cb", "[::1]:5001"),
        ("http://u:p@127.0.0.1:5001", "127.0.0.1:5001"),
        ("http://u:p@vendor.example:notaport/", "(invalid URL)"),
        ("http://u:p@[::1/", "(invalid URL)"),
        ("/relative?key=1", "(no host)"),
    ],
)
def test_host_is_host_and_port_only(url, target):
    assert http._host(url) == target


def _raising(exc: BaseException):
    def request(*args, **kwargs):
        raise exc

    return request


def _answering(status: int, **headers: str):
    def request(*args, **kwargs):
        response = requests.Response()
        response.status_code = status
        response.headers.update(headers)
        return response

    return request


def _call(idempotent: bool = False) -> CallError:
    with pytest.raises(CallError) as info:
        http.call("POST", SECRET_URL, timeout=(1, 1), idempotent=idempotent, deadline_s=5, max_body_bytes=1024)
    return info.value


def _assert_no_secret(error: CallError) -> None:
    message = str(error)
    assert message.startswith("POST vendor.example:8443: ")
    assert not any(secret in message for secret in SECRETS), message


@pytest.mark.parametrize(
    ("exc", "error", "failure"),
    [
        (requests.ConnectTimeout(f"timed out connecting to {SECRET_URL}"), TransientError, Failure.CONNECT_TIMEOUT),
        (requests.ConnectionError(refused()), TransientError, Failure.CONNECT_ERROR),
        (requests.ReadTimeout(f"read timed out: {SECRET_URL}"), UncertainError, Failure.READ_TIMEOUT),
        (requests.exceptions.ChunkedEncodingError(SECRET_URL), UncertainError, Failure.RESET_AFTER_SEND),
    ],
)
def test_transport_failure_message_and_label(monkeypatch, exc, error, failure):
    monkeypatch.setattr(http.transport, "send", _raising(exc))
    raised = _call()
    assert type(raised) is error and raised.failure is failure and raised.status is None
    _assert_no_secret(raised)
    assert raised.__suppress_context__  # the original, which names the full URL, is not chained


def test_uncertain_idempotent_call_is_transient(monkeypatch):
    monkeypatch.setattr(http.transport, "send", _raising(requests.ReadTimeout()))
    assert type(_call(idempotent=True)) is TransientError


@pytest.mark.parametrize(
    ("status", "error"),
    [(503, TransientError), (429, TransientError), (401, PermanentError), (422, PermanentError), (301, PermanentError)],
)
def test_status_failure_message(monkeypatch, status, error):
    monkeypatch.setattr(http.transport, "send", _answering(status, **{"Retry-After": "7"}))
    raised = _call()
    assert type(raised) is error and raised.status == status and raised.retry_after_s == 7.0
    assert str(raised) == f"POST vendor.example:8443: HTTP {status}"
    _assert_no_secret(raised)


def test_success_is_returned(monkeypatch):
    monkeypatch.setattr(http.transport, "send", _answering(201))
    assert (
        http.call("POST", SECRET_URL, timeout=(1, 1), idempotent=False, deadline_s=5, max_body_bytes=1024).status_code
        == 201
    )


def test_a_refusals_body_is_kept_apart_bounded_and_redacted(monkeypatch):
    def request(*args, **kwargs):
        response = requests.Response()
        response.status_code = 422
        response._content = b'{"error": "amount must be positive", "api_key": "sk_live_abc123"}' + b" " * 4000 + b"z"
        return response

    monkeypatch.setattr(http.transport, "send", request)
    raised = _call()
    assert str(raised) == "POST vendor.example:8443: HTTP 422"  # the message still carries no body
    assert raised.answer is not None and raised.answer.startswith('{"error": "amount must be positive"')
    assert "sk_live_abc123" not in raised.answer and '"api_key": "[redacted]"' in raised.answer
    assert len(raised.answer) <= 500
