"""Operators' API (admin token): dead letters, incidents, orphans, callback endpoints, retrying
tasks, reconcile now, the configured providers."""

from __future__ import annotations

from functools import partial
from typing import Any

from flask import Blueprint, Response, jsonify, request

from app.api.admin_params import (
    dead_letter_filter,
    incident_kind,
    int_arg,
    json_object,
    page_limit,
    text_arg,
)
from app.api.contract import Attach, EnableEndpoint, Mute, Note, Owner, ReplayFilter, validated
from app.api.provider_summary import provider_bodies
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
from app.auth import require_admin
from app.errors import Conflict, NotFound, ValidationFailed
from app.session import db_session
from core.urls import strip_url
from models.base import utcnow
from models.read_models import lists
from models.read_models.lists import DeadLetterFilter
from models.store import store_of
from runtime.context import liaison
from service.operator_actions import (
    CALLER_FAULT_WARNING,
    Ambiguous,
    NotFoundError,
    NotReplayable,
    attach_orphan_to,
    bulk_includes_caller_fault,
    caller_fault_matching,
    discard_one,
    discard_orphan_one,
    enable_callback_endpoint,
    mute_notifications,
    replay_matching,
    replay_one,
    unmute_notifications,
    update_incident,
)

bp = Blueprint("admin", __name__, url_prefix="/admin/v1")
bp.before_request(require_admin)

#: Route ids: a bigger number is a 404 like any unknown id, not a database integer overflow.
ID = f"int(max={MAX_ID})"


def _page(items: list[Any], limit: int, body: Any) -> dict[str, Any]:
    return {"items": [body(i) for i in items], "next_after_id": items[-1].id if len(items) == limit else None}


@bp.get("/dead-letters")
def list_dead_letters() -> Response:
    limit = page_limit(request.args)
    after = int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = lists.dead_letters(db_session(), dead_letter_filter(request.args), utcnow(), limit, after)
    return jsonify(_page(items, limit, dead_letter_body))


@bp.get(f"/dead-letters/<{ID}:letter_id>")
def show_dead_letter(letter_id: int) -> Response:
    letter = lists.dead_letter(db_session(), letter_id)
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
    body = validated(ReplayFilter, json_object(), "bad filter")
    limit = body.limit
    flt = DeadLetterFilter("open", body.kind, body.fault, body.provider, body.older_than_s, body.newer_than_s)
    now = utcnow()
    takes_caller = bulk_includes_caller_fault(flt)
    with liaison().db.transaction() as session:  # its own: the replay's batches commit apart
        caller = caller_fault_matching(session, flt, now)
    replayed, skipped = replay_matching(liaison().db, flt, now, limit, actor=API_ACTOR, caller_fault=takes_caller)
    return jsonify(
        {
            "replayed": replayed,
            "skipped": skipped,
            "caller_fault": caller,
            "caller_fault_replayed": takes_caller,
            "warning": CALLER_FAULT_WARNING if caller else None,
        }
    ), 202


@bp.get("/incidents")
def list_incidents() -> Response:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "all"):
        raise ValidationFailed("bad state", errors=[{"field": "state", "message": "open, resolved or all"}])
    limit = page_limit(request.args)
    after = int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = lists.incidents(db_session(), state, text_arg(request.args, "kind"), limit, after)
    return jsonify(_page(items, limit, incident_body))


@bp.post(f"/incidents/<{ID}:incident_id>/assign")
def assign_incident(incident_id: int) -> Response:
    owner = validated(Owner, json_object(), "bad owner").owner
    return jsonify(incident_body(_act(partial(update_incident, owner=owner), incident_id)))


@bp.post(f"/incidents/<{ID}:incident_id>/resolve")
def resolve(incident_id: int) -> Response:
    note = validated(Note, json_object(), "bad note").note
    return jsonify(incident_body(_act(partial(update_incident, resolve=True, note=note), incident_id)))


@bp.get("/callback-endpoints")
def list_endpoints() -> Response:
    return jsonify({"items": [endpoint_body(e) for e in lists.disabled_endpoints(db_session())]})


@bp.get("/callback-endpoints/health")
def list_endpoint_health() -> Response:
    """Every client callback origin failing, paused or probing; each resumes by itself when it answers."""
    now, session = utcnow(), db_session()
    return jsonify(
        {"items": [endpoint_health_body(h, now) for h in store_of(session).endpoint_health.unhealthy(session)]}
    )


@bp.post("/callback-endpoints/enable")
def enable_endpoint() -> tuple[Response, int]:
    """Re-enable ``url`` for ``client`` (which may be left out when only one client has it disabled)."""
    body = validated(EnableEndpoint, json_object(), "bad url")
    url, client = body.url, body.client
    released = _act(enable_callback_endpoint, url, client_name=client)
    return jsonify({"url": strip_url(url), "client": client, "released": released}), 202


@bp.get("/providers")
def list_providers() -> Response:
    """Each configured provider: its kind, webhook scheme, profile, poll schedule and limits (from the
    settings; never a secret)."""
    settings = liaison().settings
    return jsonify({"items": provider_bodies(settings.providers, settings.default_provider)})


@bp.get("/tasks")
def list_tasks() -> Response:
    """Operators' view across clients; ``retrying=true`` lists tasks retrying right now."""
    if request.args.get("retrying") not in ("true", "1"):
        raise ValidationFailed(
            "only retrying=true is supported here", errors=[{"field": "retrying", "message": "true"}]
        )
    limit = page_limit(request.args)
    after = int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = lists.retrying_tasks(db_session(), limit, after)
    return jsonify(_page(items, limit, operator_task_body))


@bp.get("/orphans")
def list_orphans() -> Response:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "discarded", "all"):
        raise ValidationFailed("bad state", errors=[{"field": "state", "message": "open, resolved, discarded or all"}])
    limit = page_limit(request.args)
    after = int_arg(request.args, "after_id", None, 0, MAX_ID)
    items = lists.orphans(db_session(), None if state == "all" else state, limit, after)
    return jsonify(_page(items, limit, orphan_body))


@bp.post(f"/orphans/<{ID}:orphan_id>/attach")
def attach_orphan(orphan_id: int) -> tuple[Response, int]:
    """Bind an orphan event to a task by CorrelationId (and ``client``, required when several clients
    use that id); it is then applied like any event."""
    body = validated(Attach, json_object(), "bad correlation_id")
    correlation_id, client = body.correlation_id, body.client
    return jsonify(orphan_body(_act(attach_orphan_to, orphan_id, correlation_id, client_name=client))), 202


@bp.post(f"/orphans/<{ID}:orphan_id>/discard")
def discard_orphan(orphan_id: int) -> Response:
    return jsonify(orphan_body(_act(discard_orphan_one, orphan_id)))


@bp.post("/reconcile")
def reconcile_now() -> tuple[Response, int]:
    """Queue a reconciliation run now (the same job beat runs every 5 minutes)."""
    result = liaison().publisher.celery.send_task("liaison.reconcile")
    return jsonify({"queued": True, "celery_task_id": result.id}), 202


@bp.get("/notification-mutes")
def list_mutes() -> Response:
    session = db_session()
    return jsonify({"items": [mute_body(m) for m in store_of(session).notices.mutes(session)]})


@bp.put("/notification-mutes/<kind>")
def mute_kind(kind: str) -> tuple[Response, int]:
    """Silence one incident kind's notifications until unmuted: its notices are kept, marked muted."""
    body = validated(Mute, json_object(), "bad by")
    by, note = body.by, body.note
    row, created = _act(partial(mute_notifications, by=by, note=note), incident_kind(kind))
    return jsonify(mute_body(row)), 201 if created else 200


@bp.delete("/notification-mutes/<kind>")
def unmute_kind(kind: str) -> tuple[str, int]:
    _act(unmute_notifications, incident_kind(kind))
    return "", 204
