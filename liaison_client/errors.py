"""Typed errors: every non-2xx answer of the API becomes a :class:`ProblemError` subclass.

Liaison answers errors as RFC 9457 ``application/problem+json``; the exception carries the same
fields (``status``, ``title``, ``detail``, ``errors``) plus anything else the body held
(``extra``), so a caller can branch on the class instead of parsing text::

    LiaisonError
    ├── TransportError              the request did not get an HTTP answer (connection, timeout)
    ├── UnexpectedResponse          a 2xx whose body is not what the API documents
    ├── CallbackVerificationError   a callback whose signature does not check out
    └── ProblemError                any 4xx/5xx answer
        ├── Unauthorized (401)      ├── Conflict (409)
        ├── Forbidden (403)         ├── ValidationFailed (422)
        ├── NotFound (404)          └── TooManyRequests (429, ``retry_after``)
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any


class LiaisonError(Exception):
    """Anything this client raises on purpose."""


class TransportError(LiaisonError):
    """No HTTP answer: the connection failed or timed out. The request may or may not have been
    applied; retrying a submit or cancel with the same ``idempotency_key`` is safe."""


class UnexpectedResponse(LiaisonError):
    """A successful status whose body is not the documented JSON (a proxy's page, say)."""


class CallbackVerificationError(LiaisonError):
    """A callback that is not proven to come from Liaison: answer it 4xx and do not act on it."""


class ProblemError(LiaisonError):
    """A 4xx or 5xx answer. ``errors`` lists field problems (``{"field", "message"}``) on a 422;
    ``retry_after`` is the ``Retry-After`` header in seconds, when the answer carried one."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str | None = None,
        *,
        errors: list[dict[str, str]] | None = None,
        type: str = "about:blank",
        retry_after: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.type = type
        self.retry_after = retry_after
        self.extra: dict[str, Any] = dict(extra or {})


class Unauthorized(ProblemError):
    """401: no API key, or one Liaison does not know (or no longer knows, after a rotation)."""


class Forbidden(ProblemError):
    """403: the key is valid but its client is disabled."""


class NotFound(ProblemError):
    """404: no such task for this client (another client's tasks are never visible)."""


class Conflict(ProblemError):
    """409: the Idempotency-Key was used with a different body (or, on a cancel, for another task),
    or the task is already final."""

    @property
    def state(self) -> str | None:
        """The task's final state, when a cancel came too late."""
        value = self.extra.get("state")
        return value if isinstance(value, str) else None


class ValidationFailed(ProblemError):
    """422: the request is well-formed but some fields are not acceptable (see ``errors``)."""

    def fields(self) -> dict[str, str]:
        """``{field: message}`` of every field problem."""
        return {e.get("field", ""): e.get("message", "") for e in self.errors}


class TooManyRequests(ProblemError):
    """429: a limit. ``limit`` names it (``submit_rate``, ``max_open_tasks``); ``retry_after``
    says when the same request can succeed, if Liaison knows."""

    @property
    def limit(self) -> str | None:
        value = self.extra.get("limit")
        return value if isinstance(value, str) else None


BY_STATUS: dict[int, type[ProblemError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
    429: TooManyRequests,
}

_KNOWN = {"type", "title", "status", "detail", "errors"}


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent
    or unreadable. A date in the past is 0."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def problem_from(status: int, reason: str, body: Any, retry_after: str | None = None) -> ProblemError:
    """The typed error for an answer: its status picks the class; a body that is not a problem
    object (a proxy's HTML page) still gives a ProblemError with the HTTP reason as title."""
    cls = BY_STATUS.get(status, ProblemError)
    data: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    title = data.get("title")
    detail = data.get("detail")
    raw_errors = data.get("errors")
    errors = (
        [{str(k): str(v) for k, v in item.items()} for item in raw_errors if isinstance(item, Mapping)]
        if isinstance(raw_errors, list)
        else None
    )
    problem_type = data.get("type")
    return cls(
        status,
        title if isinstance(title, str) else (reason or "HTTP error"),
        detail if isinstance(detail, str) else None,
        errors=errors,
        type=problem_type if isinstance(problem_type, str) else "about:blank",
        retry_after=parse_retry_after(retry_after),
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )
