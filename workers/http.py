"""One HTTP call under a wall-clock deadline with a capped body, its failure reduced to our error
tree. No retrying here. The socket work is ``workers.transport``; a client-supplied URL also goes
through the outbound guard there (``guard=``), and a refusal is ``OutboundRefused``.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import NewConnectionError, ReadTimeoutError

from core.classify import Failure, Kind, classify_failure, classify_status, parse_retry_after
from core.errors import CallError, OutboundRefused, PermanentError, TransientError, UncertainError
from core.outbound_guard import AllowList, Refused
from core.reasons import answer_excerpt
from workers import transport
from workers.call_deadlines import Call

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


def _failure_of(exc: BaseException, call: Call | None = None) -> Failure:
    if call is not None and call.expired:  # the watchdog cut the socket: the deadline ended it
        return Failure.READ_TIMEOUT if call.connected else Failure.CONNECT_TIMEOUT
    if isinstance(exc, socket.gaierror):  # the guard's own lookup of a callback host failed
        return Failure.CONNECT_ERROR
    if isinstance(exc, requests.ConnectTimeout):
        return Failure.CONNECT_TIMEOUT
    if isinstance(exc, (requests.ReadTimeout, ReadTimeoutError)):
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
    if not isinstance(exc, requests.RequestException):  # urllib3's errors or OSError: the body read broke off
        return Failure.RESET_AFTER_SEND
    return Failure.CONNECT_ERROR  # InvalidURL and friends: the request never left


def call(
    method: str,
    url: str,
    *,
    timeout: tuple[float, float],
    idempotent: bool,
    deadline_s: float,
    max_body_bytes: int,
    truncate: bool = False,
    guard: AllowList | None = None,
    **kwargs: Any,
) -> requests.Response:
    """Send one request; return a 2xx response (body read, at most ``max_body_bytes``) or raise the
    classified CallError.

    ``deadline_s`` bounds the whole call, connect to last body byte; a call it cuts off after the
    request left is a read timeout (uncertain), before that a connect timeout. A GET
    (``idempotent=True``) that may or may not have been seen is simply transient: asking again is
    safe. ``guard`` (the ``LIAISON_OUTBOUND_ALLOW`` exceptions) puts a client-supplied URL through
    the outbound guard. Error messages name the host, port and status, never credentials, the query,
    headers or bodies; a refusal by the guard names not even the host.
    """
    target = f"{method} {_host(url)}"
    with Call(deadline_s) as state:
        try:
            response = transport.send(
                state,
                method,
                url,
                timeout=timeout,
                max_body_bytes=max_body_bytes,
                truncate=truncate,
                guard=guard,
                **kwargs,
            )
        except Refused as exc:
            raise OutboundRefused(str(exc), failure=Failure.REFUSED) from None
        except transport.BodyTooLarge as exc:
            raise PermanentError(f"{target}: {exc}", failure=Failure.BAD_RESPONSE) from None
        except (requests.RequestException, Urllib3Error, OSError) as exc:
            failure = _failure_of(exc, state)
            kind = classify_failure(failure)
            if kind is Kind.UNCERTAIN and idempotent:
                kind = Kind.TRANSIENT
            why = f"call deadline of {deadline_s:g}s passed" if state.expired else type(exc).__name__
            raise _ERRORS[kind](f"{target}: {failure.value} ({why})", failure=failure) from None
    status_kind = classify_status(response.status_code)
    if status_kind is None:
        return response
    retry_after = parse_retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    raise _ERRORS[status_kind](
        f"{target}: HTTP {response.status_code}",
        status=response.status_code,
        retry_after_s=retry_after,
        answer=answer_excerpt(response.content),
    )
