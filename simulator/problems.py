"""RFC 9457 problem responses, so the simulator fails the way the real API contract says vendors do."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException


def problem(status: int, title: str, detail: str | None = None, **extra: Any) -> Response:
    """A ``application/problem+json`` response."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    body.update(extra)
    response = jsonify(body)
    response.status_code = status
    response.mimetype = "application/problem+json"
    return response


def http_error(exc: HTTPException) -> Response:
    """Flask's own errors (404, 405, 413, bad JSON) as problem JSON instead of HTML."""
    return problem(exc.code or 500, exc.name, exc.description)
