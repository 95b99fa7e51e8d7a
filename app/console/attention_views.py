"""The console's pages for what needs a person (``models.attention``): incidents (assign, resolve),
orphan events (attach to a task, discard) and callback endpoints disabled or failing (enable)."""

from __future__ import annotations

from functools import partial

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from app.console.blueprint import ID, PAGE, act, asking, bp, confirm, stored_json, text_arg
from app.errors import NotFound, ValidationFailed
from app.session import db_session
from models.attention import OrphanEvent
from models.base import utcnow
from models.read_models import console_pages, lists
from service.incidents import IncidentKind
from service.operator_actions import attach_orphan_to, discard_orphan_one, enable_callback_endpoint, update_incident

# --- incidents -------------------------------------------------------------------------------


@bp.get("/incidents")
def incidents() -> str:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "all"):
        raise ValidationFailed("state: open, resolved or all")
    kind = request.args.get("kind") or None
    if kind is not None and kind not in IncidentKind.ALL:
        raise ValidationFailed(f"kind: one of {', '.join(IncidentKind.ALL)}")
    after = int(request.args["after_id"]) if request.args.get("after_id", "").isdigit() else None
    items = lists.incidents(db_session(), state, kind, PAGE, after)
    next_url = (
        url_for("console.incidents", state=state, kind=kind or "", after_id=items[-1].id)
        if len(items) == PAGE
        else None
    )
    return render_template(
        "console/incidents.html",
        items=items,
        incident_tasks=console_pages.incident_tasks(db_session(), items),
        state=state,
        kind=kind,
        kinds=IncidentKind.ALL,
        next_url=next_url,
    )


@bp.get(f"/incidents/<{ID}:incident_id>")
def incident(incident_id: int) -> str:
    page = console_pages.incident_page(db_session(), incident_id)
    if page is None:
        raise NotFound(f"no incident {incident_id}")
    return render_template("console/incident.html", incident=page.incident, history=page.history)


@bp.post(f"/incidents/<{ID}:incident_id>/assign")
def incident_assign(incident_id: int) -> BaseResponse:
    owner = text_arg(request.form, "owner", 100)
    if owner is None:
        raise ValidationFailed("owner: who takes it, 1 to 100 characters")
    note = text_arg(request.form, "note", 2000)
    act(partial(update_incident, owner=owner, note=note), incident_id)
    return redirect(url_for("console.incident", incident_id=incident_id, done="assigned"))


@bp.post(f"/incidents/<{ID}:incident_id>/resolve")
def incident_resolve(incident_id: int) -> BaseResponse:
    note = text_arg(request.form, "note", 2000)
    act(partial(update_incident, resolve=True, note=note), incident_id)
    return redirect(url_for("console.incident", incident_id=incident_id, done="resolved"))


# --- orphans ---------------------------------------------------------------------------------


@bp.get("/orphans")
def orphans() -> str:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "discarded", "all"):
        raise ValidationFailed("state: open, resolved, discarded or all")
    after = int(request.args["after_id"]) if request.args.get("after_id", "").isdigit() else None
    items = lists.orphans(db_session(), None if state == "all" else state, PAGE, after)
    next_url = url_for("console.orphans", state=state, after_id=items[-1].id) if len(items) == PAGE else None
    return render_template("console/orphans.html", items=items, state=state, next_url=next_url)


def _orphan(orphan_id: int) -> OrphanEvent:
    orphan = console_pages.orphan_without_payload(db_session(), orphan_id)
    if orphan is None:
        raise NotFound(f"no orphan event {orphan_id}")
    return orphan


@bp.get(f"/orphans/<{ID}:orphan_id>")
def orphan(orphan_id: int) -> str:
    page = console_pages.orphan_page(db_session(), orphan_id)
    if page is None:
        raise NotFound(f"no orphan event {orphan_id}")
    return render_template(
        "console/orphan.html", orphan=page.orphan, payload_text=stored_json(page.payload_text), history=page.history
    )


@bp.post(f"/orphans/<{ID}:orphan_id>/attach")
def orphan_attach(orphan_id: int) -> BaseResponse:
    correlation_id = text_arg(request.form, "correlation_id")
    if correlation_id is None:
        raise ValidationFailed("correlation_id: the task's correlation id")
    act(attach_orphan_to, orphan_id, correlation_id, client_name=text_arg(request.form, "client", 100))
    return redirect(url_for("console.orphan", orphan_id=orphan_id, done="attached"))


@bp.route(f"/orphans/<{ID}:orphan_id>/discard", methods=["GET", "POST"])
def orphan_discard(orphan_id: int) -> str | BaseResponse:
    found = _orphan(orphan_id)
    if asking():
        return confirm("Discard orphan event", f"Discard orphan event {found.id} from {found.source} unapplied?")
    act(discard_orphan_one, orphan_id)
    return redirect(url_for("console.orphan", orphan_id=orphan_id, done="orphan_discarded"))


# --- callback endpoints ----------------------------------------------------------------------


@bp.get("/endpoints")
def endpoints() -> str:
    page = console_pages.endpoints_page(db_session())
    return render_template(
        "console/endpoints.html", items=page.disabled, unhealthy=page.unhealthy, now=utcnow(), history=page.history
    )


@bp.route(f"/endpoints/<{ID}:endpoint_id>/enable", methods=["GET", "POST"])
def endpoint_enable(endpoint_id: int) -> str | BaseResponse:
    endpoint = console_pages.callback_endpoint(db_session(), endpoint_id)
    if endpoint is None:
        raise NotFound(f"no callback endpoint {endpoint_id}")
    if asking():
        return confirm(
            "Enable callback endpoint",
            f"Enable {endpoint.url} for {endpoint.client.name} again and release its parked relays?",
        )
    act(enable_callback_endpoint, endpoint.url, client_name=endpoint.client.name)
    return redirect(url_for("console.endpoints", done="enabled"))
