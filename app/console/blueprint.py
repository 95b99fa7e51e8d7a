"""The console's blueprint and what every page shares: the session hooks, the template context
and filter, the error page, and the helpers a view uses to parse a form, ask for confirmation and
run an operator action as the signed-in operator. The pages themselves register on ``bp`` from
their own modules (``app/console/*_views.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, render_template, request

from app.api.representation import MAX_ID
from app.console import access
from app.errors import ApiError, Conflict, NotFound, ValidationFailed
from app.session import db_session
from core.urls import strip_url
from models.base import utcnow
from runtime.context import liaison
from service.operator_actions import Ambiguous, NotFoundError, NotReplayable
from wire.bounded_json import InvalidJson, strict_loads

bp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates", static_folder="static")
bp.before_request(access.load_session)
bp.after_request(access.finish)

ID = f"int(max={MAX_ID})"
PAGE = 50
NOTICES = {
    "replayed": "Dead letter replayed: its work is queued again with its original message id.",
    "replayed_many": "Matching dead letters replayed.",
    "discarded": "Dead letter discarded.",
    "canceled": "Cancel requested.",
    "task_replayed": "The task's open dead letters were replayed.",
    "ambiguous": "Several clients have a task with this correlation id: pick one (or add ?client= to its address).",
    "assigned": "Incident assigned.",
    "resolved": "Incident resolved.",
    "attached": "Orphan event attached and applied.",
    "orphan_discarded": "Orphan event discarded.",
    "enabled": "Callback endpoint enabled; its parked relays are released.",
    "signed_out": "Signed out.",
    "signed_out_everywhere": "Signed out everywhere: every session under your name has ended.",
}


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def stored_json(raw: str | None) -> str:
    """A JSON column (a task's input or outcome, a payload) for display, from the text it is stored
    as: a row stored before the depth limit existed may be too deep to decode at all, and is then
    shown as stored instead of failing the page."""
    if raw is None:
        return "null"
    try:
        return pretty(strict_loads(raw, max_depth=liaison().settings.max_json_depth, what="the stored JSON"))
    except InvalidJson:
        return raw[:65536] + "\n(shown as stored: deeper than LIAISON_MAX_JSON_DEPTH)"


@bp.app_template_filter("console_time")
def _console_time(value: datetime | str | None) -> str:
    """The console's one timestamp format, ISO-8601 in UTC with ``Z`` to the second (the API's,
    without its fraction): a datetime, or an ISO string the API's representation already made."""
    if not value:
        return "–"
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


@bp.app_template_filter("console_age")
def _console_age(seconds: float | None) -> str:
    """An age with its unit: seconds under two minutes, minutes under two hours, hours after."""
    if seconds is None:
        return "n/a"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@bp.context_processor
def _context() -> dict[str, Any]:
    session = access.g.get("console_session")
    return {
        "operator": session.operator if session else None,
        "csrf_token": session.csrf if session else "",
        "csrf_field": access.CSRF_FIELD,
        "notice": NOTICES.get(request.args.get("done", "")),
        "pretty": pretty,
        "strip_url": strip_url,
        "now": utcnow(),
    }


@bp.errorhandler(ApiError)
def _error(exc: ApiError) -> tuple[str, int]:
    return render_template("console/error.html", status=exc.status, title=exc.title, detail=exc.detail), exc.status


class NotAPost(ApiError):
    """An action reached by a method that only reads: nothing is done."""

    status, title = 405, "Method Not Allowed"


def asking() -> bool:
    """Whether an action's address was only asked about (GET, HEAD): show the confirmation. Only a
    POST acts; Flask answers HEAD on every GET route, so "not GET" is not "POST"."""
    return request.method != "POST"


def act(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an operator action as the signed-in operator; its refusals become the console's errors.
    Only in a POST (which ``access.load_session`` has checked for the CSRF token): a view that asks
    the wrong question of the method still acts on nothing. The request's read transaction ends
    first: the action writes in a transaction of its own, which an open read would hold up on SQLite."""
    if request.method != "POST":
        raise NotAPost("an action is a POST from its confirmation form")
    db_session().rollback()
    try:
        return action(liaison().db, *args, utcnow(), actor=access.operator(), **kwargs)
    except NotFoundError as exc:
        raise NotFound(str(exc)) from None
    except Ambiguous as exc:
        raise ValidationFailed(str(exc)) from None
    except NotReplayable as exc:
        raise Conflict(str(exc)) from None


def confirm(title: str, question: str, caution: str | None = None, /, **hidden: Any) -> str:
    """The confirmation page a state change's GET (or HEAD) shows; its form POSTs ``hidden`` back.
    ``caution``: why the action may well not help (shown above the button)."""
    return render_template(
        "console/confirm.html",
        title=title,
        question=question,
        caution=caution,
        hidden={k: v for k, v in hidden.items() if v},
    )


def text_arg(source: Any, name: str, limit: int = 200) -> str | None:
    """A form's or query's text field, stripped (None when empty); too long or holding NUL: 422."""
    value = (source.get(name) or "").strip()
    if not value:
        return None
    if len(value) > limit or "\x00" in value:
        raise ValidationFailed(f"{name}: at most {limit} characters")
    return value
