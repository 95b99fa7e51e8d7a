"""Operators' API (admin token): dead letters, incidents, orphans, callback endpoints, retrying
tasks, reconcile now."""

from __future__ import annotations

from functools import partial
from typing import Any

from flask import Blueprint, Response, jsonify, request

from app.api.representation import (
    MAX_ID,
    dead_letter_body,
    endpoint_body,
    endpoint_health_body,
    incident_body,
    mute_body,
    operator_task_body,
    orphan_body,
)
from app.api.tasks import json_body
from app.api.validation import is_http_url
from app.auth import require_admin
from app.errors import Conflict, NotFound, ValidationFailed
from app.session import db_session
from core.urls import strip_url
from models.base import utcnow
from models.endpoint_health import unhealthy
from models.messages import DEAD_LETTER_KINDS, DeadLetter
from models.notifications import mutes
from service import queries
from service.incidents import IncidentKind
from service.operator_actions import (
    Ambiguous,
    NotFoundError,
    NotReplayable,
    attach_orphan_to,
    discard_one,
    discard_orphan_one,
    enable_callback_endpoint,
    mute_notifications,
    replay_matching,
    replay_one,
    unmute_notifications,
    update_incident,
)
from service.queries import DeadLetterFilter
from workers.runtime import liaison

bp = Blueprint("admin", __name__, url_prefix="/admin/v1")
bp.before_request(require_admin)

CHOICES = {
    "state": ("open", "replayed", "discarded", "all"),
    "kind": DEAD_LETTER_KINDS,
    "fault": ("caller", "system"),
}
#: Route ids: a bigger number is a 404 like any unknown id, not a database integer overflow.
ID = f"int(max={MAX_ID})"


def _int_arg(
    source: dict[str, Any], name: str, default: int | None, lo: int, hi: int, *, json: bool = False
) -> int | None:
    """A whole number from the query string (text) or, with ``json``, a JSON body (a JSON integer
    only: not "5", 5.5 or true)."""
    value = source.get(name, default)
    if value is None:
        return None
    try:
        if json and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(name)
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = lo - 1
    if not lo <= number <= hi:
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": f"a whole number, {lo} to {hi}"}])
    return number


def _limit(source: dict[str, Any]) -> int:
    """A page size from the query string: 1 to 500, 50 when left out."""
    limit = _int_arg(source, "limit", 50, 1, 500)
    assert limit is not None  # the default is a number
    return limit


def _choice(source: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = source.get(name, default)
    if value is not None and value not in CHOICES[name]:
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": f"one of {', '.join(CHOICES[name])}"}])
    return value


def _text(source: dict[str, Any], name: str) -> str | None:
    """An optional free-text filter: a string of at most 200 characters, without NUL."""
    value = source.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > 200 or "\x00" in value):
        message = "a string of at most 200 characters, no NUL"
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": message}])
    return value


def _json_object() -> dict[str, Any]:
    """The request's JSON object; no body at all is ``{}``."""
    body = json_body() if request.get_data(cache=True) else {}
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    return body


def dead_letter_filter(source: dict[str, Any], *, json: bool = False) -> DeadLetterFilter:
    state = _choice(source, "state", "open")
    return DeadLetterFilter(
        state=None if state == "all" else state,
        kind=_choice(source, "kind"),
        fault=_choice(source, "fault"),
        provider=_text(source, "provider"),
        older_than_s=_int_arg(source, "older_than_s", None, 0, 10**9, json=json),
        newer_than_s=_int_arg(source, "newer_than_s", None, 0, 10**9, json=json),
    )


def _page(items: list[Any], limit: int, body: Any) -> dict[str, Any]:
    return {"items": [body(i) for i in items], "next_after_id": items[-1].id if len(items) == limit else None}


@bp.get("/dead-letters")
def list_dead_letters() -> Response:
    limit = _limit(request.args)
    after = _int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = queries.dead_letters(db_session(), dead_letter_filter(request.args), utcnow(), limit, after)
    return jsonify(_page(items, limit, dead_letter_body))


@bp.get(f"/dead-letters/<{ID}:letter_id>")
def show_dead_letter(letter_id: int) -> Response:
    letter = db_session().get(DeadLetter, letter_id)
    if letter is None:
        raise NotFound(f"no dead letter {letter_id}")
    return jsonify(dead_letter_body(letter))


#: who the admin API's actions are recorded as: the admin token is one shared credential
API_ACTOR = "admin API"


def _act(action: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return action(liaison().db, *args, utcnow(), actor=API_ACTOR, **kwargs)
    except NotFoundError as exc:
        raise NotFound(str(exc)) from None
    except Ambiguous as exc:
        raise ValidationFailed(str(exc), errors=[{"field": "client", "message": "required: " + str(exc)}]) from None
    except NotReplayable as exc:
        raise Conflict(str(exc)) from None


@bp.post(f"/dead-letters/<{ID}:letter_id>/replay")
def replay_dead_letter(letter_id: int) -> tuple[Response, int]:
    return jsonify(dead_letter_body(_act(replay_one, letter_id))), 202


@bp.post(f"/dead-letters/<{ID}:letter_id>/discard")
def discard_dead_letter(letter_id: int) -> Response:
    return jsonify(dead_letter_body(_act(discard_one, letter_id)))


@bp.post("/dead-letters/replay")
def replay_dead_letters() -> tuple[Response, int]:
    """Replay every open dead letter matching the body's filter (kind, fault, provider, older_than_s,
    newer_than_s), at most ``limit`` (default 1000)."""
    body = _json_object()
    limit = _int_arg(body, "limit", 1000, 1, 100_000, json=True)
    flt = dead_letter_filter({**body, "state": "open"}, json=True)
    replayed, skipped = replay_matching(liaison().db, flt, utcnow(), limit, actor=API_ACTOR)
    return jsonify({"replayed": replayed, "skipped": skipped}), 202


@bp.get("/incidents")
def list_incidents() -> Response:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "all"):
        raise ValidationFailed("bad state", errors=[{"field": "state", "message": "open, resolved or all"}])
    limit = _limit(request.args)
    after = _int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = queries.incidents(db_session(), state, _text(request.args, "kind"), limit, after)
    return jsonify(_page(items, limit, incident_body))


@bp.post(f"/incidents/<{ID}:incident_id>/assign")
def assign_incident(incident_id: int) -> Response:
    owner = _json_object().get("owner")
    if not isinstance(owner, str) or not 0 < len(owner) <= 100:
        raise ValidationFailed("bad owner", errors=[{"field": "owner", "message": "1 to 100 characters"}])
    return jsonify(incident_body(_act(partial(update_incident, owner=owner), incident_id)))


@bp.post(f"/incidents/<{ID}:incident_id>/resolve")
def resolve(incident_id: int) -> Response:
    note = _json_object().get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationFailed("bad note", errors=[{"field": "note", "message": "a string"}])
    return jsonify(incident_body(_act(partial(update_incident, resolve=True, note=note), incident_id)))


@bp.get("/callback-endpoints")
def list_endpoints() -> Response:
    return jsonify({"items": [endpoint_body(e) for e in queries.disabled_endpoints(db_session())]})


@bp.get("/callback-endpoints/health")
def list_endpoint_health() -> Response:
    """Every client callback origin failing, paused or probing; each resumes by itself when it answers."""
    now = utcnow()
    return jsonify({"items": [endpoint_health_body(h, now) for h in unhealthy(db_session())]})


def _client_name(body: dict[str, Any]) -> str | None:
    """The optional ``client`` (its name) that says whose record is meant where several clients
    share a name (a correlation id, a callback URL)."""
    name = body.get("client")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 100 or "\x00" in name):
        raise ValidationFailed("bad client", errors=[{"field": "client", "message": "a client's name"}])
    return name


@bp.post("/callback-endpoints/enable")
def enable_endpoint() -> tuple[Response, int]:
    """Re-enable ``url`` for ``client`` (which may be left out when only one client has it disabled)."""
    body = _json_object()
    url = body.get("url")
    if not is_http_url(url):
        raise ValidationFailed("bad url", errors=[{"field": "url", "message": "the disabled endpoint's URL"}])
    client = _client_name(body)
    released = _act(enable_callback_endpoint, url, client_name=client)
    return jsonify({"url": strip_url(url), "client": client, "released": released}), 202


@bp.get("/tasks")
def list_tasks() -> Response:
    """Operators' view across clients; ``retrying=true`` lists tasks retrying right now."""
    if request.args.get("retrying") not in ("true", "1"):
        raise ValidationFailed(
            "only retrying=true is supported here", errors=[{"field": "retrying", "message": "true"}]
        )
    limit = _limit(request.args)
    after = _int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = queries.retrying_tasks(db_session(), limit, after)
    return jsonify(_page(items, limit, operator_task_body))


@bp.get("/orphans")
def list_orphans() -> Response:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "discarded", "all"):
        raise ValidationFailed("bad state", errors=[{"field": "state", "message": "open, resolved, discarded or all"}])
    limit = _limit(request.args)
    after = _int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = queries.orphans(db_session(), None if state == "all" else state, limit, after)
    return jsonify(_page(items, limit, orphan_body))


@bp.post(f"/orphans/<{ID}:orphan_id>/attach")
def attach_orphan(orphan_id: int) -> tuple[Response, int]:
    """Bind an orphan event to a task by CorrelationId (and ``client``, required when several clients
    use that id); it is then applied like any event."""
    body = _json_object()
    correlation_id = body.get("correlation_id")
    if not isinstance(correlation_id, str) or not correlation_id:
        raise ValidationFailed("bad correlation_id", errors=[{"field": "correlation_id", "message": "required"}])
    client = _client_name(body)
    return jsonify(orphan_body(_act(attach_orphan_to, orphan_id, correlation_id, client_name=client))), 202


@bp.post(f"/orphans/<{ID}:orphan_id>/discard")
def discard_orphan(orphan_id: int) -> Response:
    return jsonify(orphan_body(_act(discard_orphan_one, orphan_id)))


@bp.post("/reconcile")
def reconcile_now() -> tuple[Response, int]:
    """Queue a reconciliation run now (the same job beat runs every 5 minutes)."""
    result = liaison().publisher.celery.send_task("liaison.reconcile")
    return jsonify({"queued": True, "celery_task_id": result.id}), 202


def _incident_kind(kind: str) -> str:
    if kind not in IncidentKind.ALL:
        raise ValidationFailed(
            "unknown incident kind", errors=[{"field": "kind", "message": "one of " + ", ".join(IncidentKind.ALL)}]
        )
    return kind


@bp.get("/notification-mutes")
def list_mutes() -> Response:
    return jsonify({"items": [mute_body(m) for m in mutes(db_session())]})


@bp.put("/notification-mutes/<kind>")
def mute_kind(kind: str) -> tuple[Response, int]:
    """Silence one incident kind's notifications until unmuted: its notices are kept, marked muted."""
    body = _json_object()
    by, note = body.get("by"), body.get("note")
    if not isinstance(by, str) or not 0 < len(by) <= 100:
        raise ValidationFailed("bad by", errors=[{"field": "by", "message": "who mutes it: 1 to 100 characters"}])
    if note is not None and not isinstance(note, str):
        raise ValidationFailed("bad note", errors=[{"field": "note", "message": "a string"}])
    row, created = _act(partial(mute_notifications, by=by, note=note), _incident_kind(kind))
    return jsonify(mute_body(row)), 201 if created else 200


@bp.delete("/notification-mutes/<kind>")
def unmute_kind(kind: str) -> tuple[str, int]:
    _act(unmute_notifications, _incident_kind(kind))
    return "", 204
