"""One HTTP call with timeouts, its failure reduced to our error tree. No retrying here.

``requests`` is used per call (no shared Session), so nothing pooled crosses a prefork fork.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import requests
from urllib3.exceptions import NewConnectionError

from workers.classify import Failure, Kind, classify_failure, classify_status, parse_retry_after
from workers.errors import CallError, PermanentError, TransientError, UncertainError

_ERRORS: dict[Kind, type[CallError]] = {
    Kind.TRANSIENT: TransientError,
    Kind.PERMANENT: PermanentError,
    Kind.UNCERTAIN: UncertainError,
}


def _failure_of(exc: requests.RequestException) -> Failure:
    if isinstance(exc, requests.ConnectTimeout):
        return Failure.CONNECT_TIMEOUT
    if isinstance(exc, requests.ReadTimeout):
        return Failure.READ_TIMEOUT
    cause: BaseException | None = exc
    while cause is not None:  # urllib3 nests the reason a few levels deep
        if isinstance(cause, NewConnectionError):
            return Failure.CONNECT_ERROR
        cause = getattr(cause, "reason", None) or cause.__cause__ or cause.__context__
        if cause is exc:
            break
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
    again is safe. Error messages name the host and status, never headers or bodies.
    """
    target = f"{method} {requests.utils.urlparse(url).netloc}"
    try:
        response = requests.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
    except requests.RequestException as exc:
        kind = classify_failure(_failure_of(exc))
        if kind is Kind.UNCERTAIN and idempotent:
            kind = Kind.TRANSIENT
        raise _ERRORS[kind](f"{target}: {_failure_of(exc).value} ({type(exc).__name__})") from None
    kind = classify_status(response.status_code)
    if kind is None:
        return response
    retry_after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    raise _ERRORS[kind](
        f"{target}: HTTP {response.status_code}", status=response.status_code, retry_after_s=retry_after
    )
