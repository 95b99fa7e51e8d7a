"""The API's error tree, rendered as RFC 9457 ``application/problem+json``.

    ApiError
    ├── BadRequest (400)        ├── Conflict (409)
    ├── Unauthorized (401)      ├── PayloadTooLarge (413)
    ├── Forbidden (403)         ├── UnsupportedMediaType (415)
    ├── NotFound (404)          ├── ValidationFailed (422, with ``errors`` per field)
    │                           └── TooManyRequests (429, ``Retry-After`` when known)

Werkzeug's own HTTP errors (405, 413 from MAX_CONTENT_LENGTH, …) render the same way; a database
or a broker that does not answer is a 503 with ``Retry-After``, and so is a database whose migrations
have not run (its detail names ``liaison db upgrade``); anything unexpected is a 500 problem that
names no internals.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, json
from kombu.exceptions import OperationalError as BrokerUnavailable
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from app import session
from app.observability.migrations import missing_schema, pending_message, pending_migrations
from models.db import database_unavailable
from runtime.context import liaison

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


class ApiError(Exception):
    status = 500
    title = "Internal Server Error"

    def __init__(self, detail: str | None = None, *, errors: list[dict[str, str]] | None = None, **extra: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail
        self.errors = errors
        self.extra = extra


class BadRequest(ApiError):
    status, title = 400, "Bad Request"


class Unauthorized(ApiError):
    status, title = 401, "Unauthorized"


class Forbidden(ApiError):
    status, title = 403, "Forbidden"


class NotFound(ApiError):
    status, title = 404, "Not Found"


class Conflict(ApiError):
    status, title = 409, "Conflict"


class PayloadTooLarge(ApiError):
    status, title = 413, "Payload Too Large"


class UnsupportedMediaType(ApiError):
    status, title = 415, "Unsupported Media Type"


class ValidationFailed(ApiError):
    status, title = 422, "Unprocessable Content"


class TooManyRequests(ApiError):
    """A limit: the same request can succeed later. ``retry_after`` (header value) when known."""

    status, title = 429, "Too Many Requests"

    def __init__(self, detail: str, *, retry_after: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers = {"Retry-After": retry_after} if retry_after else {}


def problem(status: int, title: str, detail: str | None = None, **extra: Any) -> Response:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    body.update({k: v for k, v in extra.items() if v is not None})
    response = Response(json.dumps(body), status=status, mimetype=PROBLEM)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        response = problem(exc.status, exc.title, exc.detail, errors=exc.errors, **exc.extra)
        response.headers.update(getattr(exc, "headers", {}))
        return response

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        response = problem(exc.code or 500, exc.name, exc.description)
        # Werkzeug's own headers (a 405's Allow, which RFC 9110 requires), not its Content-Type.
        response.headers.update({k: v for k, v in exc.get_headers() if k.lower() != "content-type"})
        return response

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    def _database_error(exc: DBAPIError | PoolTimeout) -> Response:
        if missing_schema(exc):
            session.release()  # SQLite: the failed transaction holds the lock the check would wait for
            pending = pending_migrations(liaison().db.engine)
        else:
            pending = None
        if pending is not None:
            # The release step has not run: every request fails the same way until it does. One
            # warning line (no traceback), and a 503 whose detail names the fix.
            log.warning("database migrations pending: %s", pending.describe())
            response = problem(503, "Service Unavailable", pending_message(pending))
            response.headers["Retry-After"] = "30"
            return response
        if not database_unavailable(exc):
            return _unexpected(exc)
        # The database is restarting, the connection died under the request (the pool is discarded
        # with it), or no pooled connection came free in time: asking again in a moment reaches a
        # fresh or a free one. Nothing was committed.
        log.warning("database unavailable during a request: %s", type(getattr(exc, "orig", None) or exc).__name__)
        response = problem(503, "Service Unavailable", "the database is not answering; try again in a moment")
        response.headers["Retry-After"] = "1"
        return response

    @app.errorhandler(BrokerUnavailable)
    def _broker_error(exc: BrokerUnavailable) -> Response:
        # A request that publishes directly (POST /admin/v1/reconcile) while the broker restarts;
        # kombu has retried already. The message names no host: the broker URL may carry a password.
        log.warning("broker unavailable during a request: %s", type(exc.__cause__ or exc).__name__)
        response = problem(503, "Service Unavailable", "the broker is not answering; try again in a moment")
        response.headers["Retry-After"] = "5"
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return problem(500, "Internal Server Error", "an unexpected error occurred; it has been logged")
