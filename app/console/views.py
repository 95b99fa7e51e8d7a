"""The console's pages and actions. Every action is an ``service.operator_actions`` call with the
signed-in operator as its actor; every state change is a POST with a CSRF token, reached through a
confirmation page (GET on the same URL), then redirected (post/redirect/get)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from flask import Blueprint, redirect, render_template, request, url_for
from kombu.exceptions import KombuError
from markupsafe import Markup
from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import defer
from werkzeug.wrappers import Response as BaseResponse

from app.api.admin import CHOICES, dead_letter_filter
from app.api.representation import MAX_ID, callbacks_waiting_body, decode_cursor, encode_cursor, waiting_body
from app.console import access
from app.console.chart import finished_chart
from app.errors import ApiError, Conflict, NotFound, ValidationFailed
from app.observability.queue_probe import BrokerProbeError
from app.observability.web import business_collector
from app.session import db_session
from core.states import TERMINAL, State
from core.urls import strip_url
from models import audit
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.base import utcnow
from models.client import ApiKey, Client
from models.endpoint_health import paused_endpoint, unhealthy
from models.messages import DEAD_LETTER_KINDS, DeadLetter, OutboxMessage
from models.task import ExternalTask, TaskEvent
from service import overview, queries
from service.incidents import IncidentKind
from service.operator_actions import (
    Ambiguous,
    NotFoundError,
    NotReplayable,
    attach_orphan_to,
    cancel_task,
    client_named,
    discard_one,
    discard_orphan_one,
    enable_callback_endpoint,
    replay_matching,
    replay_one,
    update_incident,
)
from wire.bounded_json import InvalidJson, strict_loads
from workers.runtime import liaison

bp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates", static_folder="static")
bp.before_request(access.load_session)
bp.after_request(access.finish)

ID = f"int(max={MAX_ID})"
PAGE = 50
#: a task page shows at most this many timeline events (the newest are kept)
TIMELINE_LIMIT = 500
NOTICES = {
    "replayed": "Dead letter replayed: its work is queued again with its original message id.",
    "replayed_many": "Matching dead letters replayed.",
    "discarded": "Dead letter discarded.",
    "canceled": "Cancel requested.",
    "task_replayed": "The task's open dead letters were replayed.",
    "assigned": "Incident assigned.",
    "resolved": "Incident resolved.",
    "attached": "Orphan event attached and applied.",
    "orphan_discarded": "Orphan event discarded.",
    "enabled": "Callback endpoint enabled; its parked relays are released.",
    "signed_out": "Signed out.",
}
AGES = [("", "any"), ("300", "5 minutes"), ("3600", "1 hour"), ("86400", "1 day"), ("604800", "7 days")]


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _stored_json(column: Any, key: Any, key_value: int) -> str:
    """A JSON column (a task's input or outcome, a payload) for display, read as text: a row
    stored before the depth limit existed may be too deep to decode at all, and is then shown as
    stored instead of failing the page."""
    raw = db_session().scalar(select(cast(column, Text)).where(key == key_value))
    if raw is None:
        return "null"
    try:
        return _pretty(strict_loads(raw, max_depth=liaison().settings.max_json_depth, what="the stored JSON"))
    except InvalidJson:
        return raw[:65536] + "\n(shown as stored: deeper than LIAISON_MAX_JSON_DEPTH)"


@bp.app_template_filter("console_time")
def _console_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "–"


@bp.context_processor
def _context() -> dict[str, Any]:
    session = access.g.get("console_session")
    return {
        "operator": session.operator if session else None,
        "csrf_token": session.csrf if session else "",
        "csrf_field": access.CSRF_FIELD,
        "notice": NOTICES.get(request.args.get("done", "")),
        "pretty": _pretty,
        "strip_url": strip_url,
        "now": utcnow(),
    }


@bp.errorhandler(ApiError)
def _error(exc: ApiError) -> tuple[str, int]:
    return render_template("console/error.html", status=exc.status, title=exc.title, detail=exc.detail), exc.status


def _act(action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an operator action as the signed-in operator; its refusals become the console's errors.
    The request's read transaction ends first: the action writes in a transaction of its own, which
    an open read would hold up on SQLite."""
    db_session().rollback()
    try:
        return action(liaison().db, *args, utcnow(), actor=access.operator(), **kwargs)
    except NotFoundError as exc:
        raise NotFound(str(exc)) from None
    except Ambiguous as exc:
        raise ValidationFailed(str(exc)) from None
    except NotReplayable as exc:
        raise Conflict(str(exc)) from None


def _confirm(title: str, question: str, **hidden: Any) -> str:
    return render_template(
        "console/confirm.html", title=title, question=question, hidden={k: v for k, v in hidden.items() if v}
    )


def _text_arg(source: Any, name: str, limit: int = 200) -> str | None:
    value = (source.get(name) or "").strip()
    if not value:
        return None
    if len(value) > limit or "\x00" in value:
        raise ValidationFailed(f"{name}: at most {limit} characters")
    return value


# --- sign in / out ---------------------------------------------------------------------------


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> str | BaseResponse | tuple[str, int]:
    error = None
    if request.method == "POST":
        name = (request.form.get("operator") or "").strip()
        if not access.OPERATOR_NAME.fullmatch(name):
            error = "Your name: 1 to 64 letters, digits, spaces or . _ @ -, starting with a letter or digit."
        elif not access.token_matches(request.form.get("token", "")):
            error = "That is not the admin token."
        else:
            access.sign_in(name)
            return redirect(access.safe_next(request.args.get("next")))
        return render_template("console/sign_in.html", error=error), 401 if "token" in error else 422
    return render_template("console/sign_in.html", error=error)


@bp.post("/sign-out")
def sign_out() -> BaseResponse:
    access.sign_out()
    return redirect(url_for("console.sign_in", done="signed_out"))


# --- overview --------------------------------------------------------------------------------


@bp.get("/", endpoint="overview")
def overview_page() -> str:
    session = db_session()
    settings = liaison().settings
    providers = sorted(settings.providers)
    counts = overview.task_counts(session, providers)
    providers = sorted({*providers, *(p for _, p in counts.cells)})
    minutes = overview.finished_per_minute(session, utcnow())
    try:
        queues: list[Any] | None = business_collector().queue_depths()
        broker_error = None
    except (KombuError, OSError, BrokerProbeError) as exc:
        queues, broker_error = None, type(exc).__name__
    dead = overview.open_dead_letters(session)
    return render_template(
        "console/overview.html",
        states=[s.value for s in State],
        providers=providers,
        counts=counts,
        retrying=overview.retrying_count(session),
        retrying_tasks=queries.operator_tasks(session, queries.TaskFilter(retrying=True), 10),
        outbox=overview.outbox_backlog(session),
        dead=dead,
        dead_total=sum(dead.values()),
        dead_kinds=DEAD_LETTER_KINDS,
        incidents=overview.open_incidents(session),
        orphans=overview.open_orphans(session),
        endpoints=overview.disabled_endpoints(session),
        paused_endpoints=overview.paused_endpoints(session),
        queues=queues,
        broker_error=broker_error,
        chart=Markup(
            finished_chart([(m.start, m.succeeded, m.failed) for m in minutes])
        ),  # the chart escapes its labels
        finished_last_hour=(sum(m.succeeded for m in minutes), sum(m.failed for m in minutes)),
        flower_url=settings.flower_url,
    )


# --- tasks -----------------------------------------------------------------------------------


@bp.get("/tasks")
def tasks() -> str:
    session = db_session()
    args = request.args
    state = args.get("state") or None
    if state is not None and state not in {s.value for s in State}:
        raise ValidationFailed(f"state: one of {', '.join(s.value for s in State)}")
    provider = _text_arg(args, "provider", 100)
    client = _text_arg(args, "client", 100)
    client_id = None
    if client is not None:
        try:
            client_id = client_named(session, client).id
        except NotFoundError as exc:
            raise NotFound(str(exc)) from None
    flt = queries.TaskFilter(
        state=state,
        provider=provider,
        client_id=client_id,
        retrying=args.get("retrying") in ("1", "true", "on"),
        correlation_id=_text_arg(args, "correlation_id"),
    )
    before = decode_cursor(args["cursor"]) if args.get("cursor") else None
    items = queries.operator_tasks(session, flt, PAGE, before)
    next_args: dict[str, Any] = {k: v for k, v in args.items() if k != "cursor" and v}
    next_url = (
        url_for("console.tasks", **{**next_args, "cursor": encode_cursor(items[-1].id)}) if len(items) == PAGE else None
    )
    return render_template(
        "console/tasks.html",
        items=items,
        filters=flt,
        args=args,
        states=[s.value for s in State],
        providers=sorted(liaison().settings.providers),
        next_url=next_url,
        terminal={s.value for s in TERMINAL},
    )


def _task(task_id: int) -> ExternalTask:
    task = db_session().get(ExternalTask, task_id, options=[defer(ExternalTask.input), defer(ExternalTask.outcome)])
    if task is None:
        raise NotFound(f"no task {task_id}")
    return task


@bp.get(f"/tasks/<{ID}:task_id>")
def task(task_id: int) -> str:
    session = db_session()
    found = _task(task_id)
    events = list(
        session.scalars(
            select(TaskEvent).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id.desc()).limit(TIMELINE_LIMIT)
        )
    )[::-1]
    total_events = (
        session.scalar(select(func.count()).select_from(TaskEvent).where(TaskEvent.task_id == task_id))
        if len(events) == TIMELINE_LIMIT
        else len(events)
    )
    outbox = queries.task_outbox(session, task_id)
    letters = queries.task_dead_letters(session, task_id)
    return render_template(
        "console/task.html",
        task=found,
        events=events,
        total_events=total_events,
        outbox=outbox,
        letters=letters,
        open_letters=[d for d in letters if d.state == "open"],
        incidents=queries.task_incidents(session, found, [row.id for row in outbox]),
        final=found.state in {s.value for s in TERMINAL},
        retrying=found.next_attempt_at is not None and found.state not in {s.value for s in TERMINAL},
        waiting=waiting_body(found),
        callbacks_waiting=callbacks_waiting_body(
            paused_endpoint(session, found.client_id, found.callback_url or found.client.callback_url, utcnow())
        ),
        input_text=_stored_json(ExternalTask.input, ExternalTask.id, task_id),
        outcome_text=_stored_json(ExternalTask.outcome, ExternalTask.id, task_id),
    )


@bp.route(f"/tasks/<{ID}:task_id>/cancel", methods=["GET", "POST"])
def task_cancel(task_id: int) -> str | BaseResponse:
    found = _task(task_id)
    if request.method == "GET":
        return _confirm(
            "Cancel task", f"Cancel task {found.correlation_id} of {found.client.name} (now {found.state})?"
        )
    _act(cancel_task, task_id)
    return redirect(url_for("console.task", task_id=task_id, done="canceled"))


@bp.route(f"/tasks/<{ID}:task_id>/replay", methods=["GET", "POST"])
def task_replay(task_id: int) -> str | BaseResponse:
    found = _task(task_id)
    letters = [d for d in queries.task_dead_letters(db_session(), task_id) if d.state == "open"]
    if not letters:
        raise Conflict("this task has no open dead letter")
    if request.method == "GET":
        ids = ", ".join(str(d.id) for d in letters)
        return _confirm("Replay dead letters", f"Replay the open dead letters of task {found.correlation_id} ({ids})?")
    for letter in letters:
        _act(replay_one, letter.id)
    return redirect(url_for("console.task", task_id=task_id, done="task_replayed"))


# --- dead letters ----------------------------------------------------------------------------


def _letter_filter() -> tuple[Any, dict[str, str]]:
    args = {k: v for k, v in request.values.items() if v and k != access.CSRF_FIELD}
    return dead_letter_filter(args), args


@bp.get("/dead-letters")
def dead_letters() -> str:
    flt, args = _letter_filter()
    after = None
    if request.args.get("after_id"):
        try:
            after = int(request.args["after_id"])
        except ValueError:
            raise ValidationFailed("after_id: a whole number") from None
    items = queries.dead_letters(db_session(), flt, utcnow(), PAGE, after)
    next_args: dict[str, Any] = {k: v for k, v in args.items() if k != "after_id"}
    next_url = (
        url_for("console.dead_letters", **{**next_args, "after_id": str(items[-1].id)}) if len(items) == PAGE else None
    )
    return render_template(
        "console/dead_letters.html",
        items=items,
        args=args,
        choices=CHOICES,
        ages=AGES,
        providers=sorted(liaison().settings.providers),
        next_url=next_url,
    )


def _letter(letter_id: int) -> DeadLetter:
    letter = db_session().get(DeadLetter, letter_id, options=[defer(DeadLetter.payload)])
    if letter is None:
        raise NotFound(f"no dead letter {letter_id}")
    return letter


@bp.get(f"/dead-letters/<{ID}:letter_id>")
def dead_letter(letter_id: int) -> str:
    letter = _letter(letter_id)
    session = db_session()
    task_id = None
    if letter.outbox_id is not None:
        task_id = session.scalar(select(OutboxMessage.task_id).where(OutboxMessage.id == letter.outbox_id))
    return render_template(
        "console/dead_letter.html",
        letter=letter,
        task_id=task_id,
        payload_text=_stored_json(DeadLetter.payload, DeadLetter.id, letter_id),
        history=audit.history(session, "dead_letter", letter_id),
    )


@bp.route(f"/dead-letters/<{ID}:letter_id>/replay", methods=["GET", "POST"])
def dead_letter_replay(letter_id: int) -> str | BaseResponse:
    letter = _letter(letter_id)
    if request.method == "GET":
        return _confirm(
            "Replay dead letter",
            f"Replay dead letter {letter.id} ({letter.kind}, {letter.fault}) for {letter.correlation_id or '-'}?",
        )
    _act(replay_one, letter_id)
    return redirect(url_for("console.dead_letter", letter_id=letter_id, done="replayed"))


@bp.route(f"/dead-letters/<{ID}:letter_id>/discard", methods=["GET", "POST"])
def dead_letter_discard(letter_id: int) -> str | BaseResponse:
    letter = _letter(letter_id)
    if request.method == "GET":
        return _confirm(
            "Discard dead letter",
            f"Discard dead letter {letter.id} ({letter.kind} for {letter.correlation_id or '-'}) without redoing it?",
        )
    _act(discard_one, letter_id)
    return redirect(url_for("console.dead_letter", letter_id=letter_id, done="discarded"))


#: the most one replay-matching form replays (the CLI and the admin API take larger batches)
REPLAY_MATCHING_LIMIT = 1000


@bp.route("/dead-letters/replay", methods=["GET", "POST"])
def dead_letters_replay() -> str | BaseResponse:
    flt, args = _letter_filter()
    if request.method == "GET":
        session = db_session()
        matching = session.scalar(
            flt.apply(select(func.count()).select_from(DeadLetter), utcnow()).where(DeadLetter.state == "open")
        )
        shown = ", ".join(f"{k}={v}" for k, v in sorted(args.items()) if k != "state") or "no filter"
        return _confirm(
            "Replay matching dead letters",
            f"Replay every open dead letter matching {shown}: {matching} now (at most {REPLAY_MATCHING_LIMIT})?",
            **args,
        )
    db_session().rollback()
    replayed, skipped = replay_matching(liaison().db, flt, utcnow(), REPLAY_MATCHING_LIMIT, actor=access.operator())
    return redirect(url_for("console.dead_letters", done="replayed_many", replayed=replayed, skipped=skipped))


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
    items = queries.incidents(db_session(), state, kind, PAGE, after)
    next_url = (
        url_for("console.incidents", state=state, kind=kind or "", after_id=items[-1].id)
        if len(items) == PAGE
        else None
    )
    return render_template(
        "console/incidents.html", items=items, state=state, kind=kind, kinds=IncidentKind.ALL, next_url=next_url
    )


def _incident(incident_id: int) -> Incident:
    incident = db_session().get(Incident, incident_id)
    if incident is None:
        raise NotFound(f"no incident {incident_id}")
    return incident


@bp.get(f"/incidents/<{ID}:incident_id>")
def incident(incident_id: int) -> str:
    found = _incident(incident_id)
    return render_template(
        "console/incident.html", incident=found, history=audit.history(db_session(), "incident", incident_id)
    )


@bp.post(f"/incidents/<{ID}:incident_id>/assign")
def incident_assign(incident_id: int) -> BaseResponse:
    owner = _text_arg(request.form, "owner", 100)
    if owner is None:
        raise ValidationFailed("owner: who takes it, 1 to 100 characters")
    note = _text_arg(request.form, "note", 2000)
    _act(partial(update_incident, owner=owner, note=note), incident_id)
    return redirect(url_for("console.incident", incident_id=incident_id, done="assigned"))


@bp.post(f"/incidents/<{ID}:incident_id>/resolve")
def incident_resolve(incident_id: int) -> BaseResponse:
    note = _text_arg(request.form, "note", 2000)
    _act(partial(update_incident, resolve=True, note=note), incident_id)
    return redirect(url_for("console.incident", incident_id=incident_id, done="resolved"))


# --- orphans ---------------------------------------------------------------------------------


@bp.get("/orphans")
def orphans() -> str:
    state = request.args.get("state", "open")
    if state not in ("open", "resolved", "discarded", "all"):
        raise ValidationFailed("state: open, resolved, discarded or all")
    after = int(request.args["after_id"]) if request.args.get("after_id", "").isdigit() else None
    items = queries.orphans(db_session(), None if state == "all" else state, PAGE, after)
    next_url = url_for("console.orphans", state=state, after_id=items[-1].id) if len(items) == PAGE else None
    return render_template("console/orphans.html", items=items, state=state, next_url=next_url)


def _orphan(orphan_id: int) -> OrphanEvent:
    orphan = db_session().get(OrphanEvent, orphan_id, options=[defer(OrphanEvent.payload)])
    if orphan is None:
        raise NotFound(f"no orphan event {orphan_id}")
    return orphan


@bp.get(f"/orphans/<{ID}:orphan_id>")
def orphan(orphan_id: int) -> str:
    found = _orphan(orphan_id)
    return render_template(
        "console/orphan.html",
        orphan=found,
        payload_text=_stored_json(OrphanEvent.payload, OrphanEvent.id, orphan_id),
        history=audit.history(db_session(), "orphan", orphan_id),
    )


@bp.post(f"/orphans/<{ID}:orphan_id>/attach")
def orphan_attach(orphan_id: int) -> BaseResponse:
    correlation_id = _text_arg(request.form, "correlation_id")
    if correlation_id is None:
        raise ValidationFailed("correlation_id: the task's correlation id")
    _act(attach_orphan_to, orphan_id, correlation_id, client_name=_text_arg(request.form, "client", 100))
    return redirect(url_for("console.orphan", orphan_id=orphan_id, done="attached"))


@bp.route(f"/orphans/<{ID}:orphan_id>/discard", methods=["GET", "POST"])
def orphan_discard(orphan_id: int) -> str | BaseResponse:
    found = _orphan(orphan_id)
    if request.method == "GET":
        return _confirm("Discard orphan event", f"Discard orphan event {found.id} from {found.source} unapplied?")
    _act(discard_orphan_one, orphan_id)
    return redirect(url_for("console.orphan", orphan_id=orphan_id, done="orphan_discarded"))


# --- callback endpoints and clients ----------------------------------------------------------


@bp.get("/endpoints")
def endpoints() -> str:
    session = db_session()
    disabled = queries.disabled_endpoints(session)
    return render_template(
        "console/endpoints.html",
        items=disabled,
        unhealthy=unhealthy(session),
        now=utcnow(),
        history={e.id: audit.history(session, "endpoint", e.id, limit=5) for e in disabled},
    )


@bp.route(f"/endpoints/<{ID}:endpoint_id>/enable", methods=["GET", "POST"])
def endpoint_enable(endpoint_id: int) -> str | BaseResponse:
    endpoint = db_session().get(CallbackEndpoint, endpoint_id)
    if endpoint is None:
        raise NotFound(f"no callback endpoint {endpoint_id}")
    if request.method == "GET":
        return _confirm(
            "Enable callback endpoint",
            f"Enable {endpoint.url} for {endpoint.client.name} again and release its parked relays?",
        )
    _act(enable_callback_endpoint, endpoint.url, client_name=endpoint.client.name)
    return redirect(url_for("console.endpoints", done="enabled"))


@bp.get("/clients")
def clients() -> str:
    session = db_session()
    live_keys = {
        int(client_id): int(n)
        for client_id, n in session.execute(
            select(ApiKey.client_id, func.count())
            .where(ApiKey.retired_at.is_(None), ApiKey.revoked_at.is_(None))
            .group_by(ApiKey.client_id)
        )
    }
    rows = [
        {
            "name": c.name,
            "callback_url": strip_url(c.callback_url) if c.callback_url else None,
            "secrets": len(c.callback_secrets or []),
            "keys": live_keys.get(c.id, 0),
            "origins": len(c.callback_origins or []),
            "disabled_at": c.disabled_at,
        }
        for c in session.scalars(select(Client).order_by(Client.name).limit(1000))
    ]
    return render_template("console/clients.html", items=rows)
