"""Domain apps' API: submit, get and list tasks. Parse, call the core, commit, respond."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import commands
from app.api.contract import CancelTask, validated
from app.api.representation import (
    TIMELINE_CAP,
    TIMELINE_MAX_LIMIT,
    callbacks_waiting_body,
    decode_cursor,
    encode_cursor,
    task_body,
    timeline_entry,
)
from app.api.validation import CORRELATION_ID, valid_idempotency_key
from app.auth import current_client
from app.errors import BadRequest, Conflict, NotFound, UnsupportedMediaType, ValidationFailed
from app.limits import check_submit_rate, refusals_commit, retake_after_rollback
from app.session import db_session
from core.states import State
from core.trace_context import trace_id_of, valid_traceparent
from foundation import tracing
from foundation.logging import bind
from models.base import utcnow
from models.client import Client
from models.read_models import lists
from models.store import store_of
from models.task import ExternalTask
from runtime.context import Liaison, liaison
from service import claims, intake
from service.lifecycle import AlreadyFinal, CancelKeyReused, cancel_key_first_time, request_cancel
from wire.bounded_json import InvalidJson, TooDeep, strict_loads

bp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks")


def json_body(deep_field: str | None = None) -> Any:
    """The request's JSON, its depth checked on the text before parsing: one level for the body
    object, the setting's limit for a field in it. Too deep is a 422 naming ``deep_field`` (the one
    field that may nest), otherwise the body; not JSON at all is a 400."""
    if not request.is_json:
        raise UnsupportedMediaType("send Content-Type: application/json")
    limit = liaison().settings.max_json_depth
    try:
        return strict_loads(request.get_data(cache=True), max_depth=limit + 1)
    except TooDeep as exc:
        field = deep_field or "body"
        message = (
            f"nested too deeply: at most {limit} levels (the request was {exc.depth} deep, the body object included)"
        )
        raise ValidationFailed(f"{field} is nested too deeply", errors=[{"field": field, "message": message}]) from None
    except InvalidJson as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


def find_task(session: Session, client: Client, correlation_id: str) -> ExternalTask:
    """The client's task, or 404. An id no task can have (say, with a NUL byte) is not looked up."""
    task = intake.find_task(session, client, correlation_id) if CORRELATION_ID.fullmatch(correlation_id) else None
    if task is None:
        raise NotFound("no such task")
    return task


@bp.post("")
def submit() -> tuple[Response, int] | tuple[Response, int, dict[str, str]]:
    ctx = liaison()
    client = current_client()
    session = db_session()
    # Before any parsing (junk counts too), in the transaction of authentication's read, which the
    # submit goes on in: a database limiter's slot commits with the task, or with the refusal.
    check_submit_rate(ctx.limiter, ctx.settings, client, session)
    with refusals_commit(session):
        result = _submit(ctx, client, session)
    bind(correlation_id=result.task.correlation_id)
    body = task_body(result.task)
    if not result.created:
        return jsonify(body), 200
    location = url_for("tasks.get_task", correlation_id=result.task.correlation_id)
    return jsonify(body), 202, {"Location": location}


def _submit(ctx: Liaison, client: Client, session: Session) -> intake.SubmitResult:
    """Read the request and record its task (or find the one it made before) through the one way in
    for domain apps' commands (``app.commands``). A refusal raises its 4xx (``app.limits.refusals_commit``
    commits the slot it took); nothing is rolled back but the loser of a race with its own identical
    request, whose retry (its slot taken again) answers with the winner's task."""
    key = valid_idempotency_key(request.headers.get("Idempotency-Key"))
    now = utcnow()
    body = json_body(deep_field="input")
    # The trace the task continues: the submit's own server span with tracing on, else the caller's
    # header as received (an invalid one is absent, never a 4xx: W3C Trace Context).
    traceparent = tracing.current_traceparent() or valid_traceparent(request.headers.get("traceparent"))
    bind(trace_id=trace_id_of(traceparent))

    def record() -> intake.SubmitResult:
        result = commands.submit(ctx.settings, session, client, body, key, now, traceparent)
        session.commit()
        return result

    try:
        return record()
    except IntegrityError:
        # A concurrent identical request won the unique constraint; the retry returns its task.
        session.rollback()
        retake_after_rollback(ctx.limiter, ctx.settings, client, session)
        return record()


@bp.post("/<correlation_id>/cancel")
def cancel(correlation_id: str) -> tuple[Response, int]:
    """Ask for cancellation (202). The task ends ``canceled`` once the vendor confirms; a task the
    vendor never saw is canceled at once; a final task answers 409 with its state."""
    client = current_client()
    key = valid_idempotency_key(request.headers.get("Idempotency-Key"))
    reason = validated(CancelTask, json_body() if request.get_data(cache=True) else {}, "bad reason").reason
    session = db_session()
    task = claims.lock_task(session, find_task(session, client, correlation_id).id)
    try:
        if key is not None and not cancel_key_first_time(session, client.id, task, key, utcnow()):
            return jsonify(task_body(task)), 202  # the same request again: same answer, nothing more done
    except CancelKeyReused as exc:  # bound to the task it first canceled: a conflict, like a submit key's
        session.rollback()
        raise Conflict(str(exc), errors=[{"field": "Idempotency-Key", "message": str(exc)}]) from None
    try:
        request_cancel(session, task, reason, utcnow())
    except AlreadyFinal as exc:
        session.rollback()
        raise Conflict(str(exc), state=exc.state) from None
    session.commit()  # the outbox hook publishes what it wrote
    return jsonify(task_body(task)), 202


def timeline_page(
    session: Session, task_id: int, limit: int, after_id: int | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """At most ``limit`` entries, oldest first, from after the event ``after_id``, and the cursor of
    the next page (None when these are the last): one statement, ``limit + 1`` rows. Oldest first
    because a timeline only grows at its end: a cursor taken once goes on meaning the same place,
    so a client that pages to the end, or comes back later with the last cursor, sees every entry
    once, those added since included."""
    events = lists.task_events(session, task_id, limit + 1, after_id)
    page = events[:limit]
    return [timeline_entry(e) for e in page], encode_cursor(page[-1].id) if len(events) > limit else None


@bp.get("/<correlation_id>")
def get_task(correlation_id: str) -> Response:
    session = db_session()
    task = find_task(session, current_client(), correlation_id)
    body = task_body(task)
    body["timeline"], body["timeline_next_cursor"] = timeline_page(session, task.id, TIMELINE_CAP)
    url = task.callback_url or current_client().callback_url
    body["callbacks_waiting"] = callbacks_waiting_body(
        store_of(session).endpoint_health.paused_endpoint(session, task.client_id, url, utcnow())
    )
    return jsonify(body)


@bp.get("/<correlation_id>/timeline")
def get_timeline(correlation_id: str) -> Response:
    """The task's timeline a page at a time, oldest first: ``cursor`` is a ``timeline_next_cursor``
    or ``next_cursor`` (none: from the start)."""
    limit = _limit(TIMELINE_CAP, TIMELINE_MAX_LIMIT)
    cursor = request.args.get("cursor")
    after_id = decode_cursor(cursor) if cursor else None
    session = db_session()
    task = find_task(session, current_client(), correlation_id)
    entries, next_cursor = timeline_page(session, task.id, limit, after_id)
    return jsonify({"timeline": entries, "next_cursor": next_cursor})


def _limit(default: int, most: int) -> int:
    """The ``limit`` query argument, 1 to ``most``; a 422 naming it otherwise."""
    try:
        limit = int(request.args.get("limit", default))
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise ValidationFailed("bad limit", errors=[{"field": "limit", "message": f"1 to {most}"}])
    return limit


@bp.get("")
def list_tasks() -> Response:
    client = current_client()
    limit = _limit(50, 200)
    state = request.args.get("state") or None
    if state is not None and state not in set(State):
        raise ValidationFailed("bad state", errors=[{"field": "state", "message": f"one of {', '.join(State)}"}])
    cursor = request.args.get("cursor")
    before_id = decode_cursor(cursor) if cursor else None
    tasks = lists.newest_tasks(db_session(), limit + 1, client_id=client.id, state=state, before_id=before_id)
    page = tasks[:limit]
    next_cursor = encode_cursor(page[-1].id) if len(tasks) > limit else None
    return jsonify({"tasks": [task_body(t) for t in page], "next_cursor": next_cursor})
