"""One HTTP call with timeouts, its failure reduced to our error tree. No retrying here.

``requests`` is used per call (no shared Session), so nothing pooled crosses a prefork fork.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import NewConnectionError

from workers.classify import Failure, Kind, classify_failure, classify_status, parse_retry_after
from workers.errors import CallError, PermanentError, TransientError, UncertainError

_ERRORS: dict[Kind, type[CallError]] = {
    Kind.TRANSIENT: TransientError,
    Kind.PERMANENT: PermanentError,
    Kind.UNCERTAIN: UncertainError,
}


def _host(url: str) -> str:
    """``host[:port]`` of a URL for messages: the netloc may carry ``user:password@``, the query an
    API key, and messages reach logs, ``task.last_error`` (shown to clients) and dead letters."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # a malformed port or IPv6 literal
        return "(invalid URL)"
    if not host:
        return "(no host)"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port is not None else host


def _wrapped(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` wraps: urllib3's ``reason``, requests' first argument, or the chain."""
    candidates = (getattr(exc, "reason", None), *exc.args[:1], exc.__cause__, exc.__context__)
    return next((c for c in candidates if isinstance(c, BaseException)), None)


def _failure_of(exc: requests.RequestException) -> Failure:
    if isinstance(exc, requests.ConnectTimeout):
        return Failure.CONNECT_TIMEOUT
    if isinstance(exc, requests.ReadTimeout):
        return Failure.READ_TIMEOUT
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # urllib3 nests the reason a few levels deep
        if isinstance(cause, NewConnectionError):
            return Failure.CONNECT_ERROR
        seen.add(id(cause))
        cause = _wrapped(cause)
    if isinstance(exc, (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)):
        return Failure.RESET_AFTER_SEND
    return Failure.CONNECT_ERROR  # InvalidURL and friends: the request never left


def call(
    method: str,
    url: str,
    *,
    timeout: tuple[float, float],
    idempotent: bool,
    **kwargs: Any,
) -> requests.Response:
    """Send one request; return a 2xx response or raise the classified CallError.

    A GET (``idempotent=True``) that may or may not have been seen is simply transient: asking
    again is safe. Error messages name the host, port and status, never credentials, the query,
    headers or bodies.
    """
    target = f"{method} {_host(url)}"
    try:
        response = requests.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
    except requests.RequestException as exc:
        failure = _failure_of(exc)
        kind = classify_failure(failure)
        if kind is Kind.UNCERTAIN and idempotent:
            kind = Kind.TRANSIENT
        raise _ERRORS[kind](f"{target}: {failure.value} ({type(exc).__name__})", failure=failure) from None
    kind = classify_status(response.status_code)
    if kind is None:
        return response
    retry_after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    raise _ERRORS[kind](
        f"{target}: HTTP {response.status_code}", status=response.status_code, retry_after_s=retry_after
    )
