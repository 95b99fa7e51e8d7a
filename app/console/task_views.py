"""The console's tasks: the filtered list, a task's page (its timeline, outbox rows, dead letters,
incidents, input and outcome, where its callbacks go; ``models.read_models.task_page`` reads them), a task
found by its correlation id (``/console/tasks/<correlation id>``, ``?client=`` when several clients
used it, or ``/console/clients/<client>/tasks/<correlation id>``), and its cancel and replay."""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from app.api.representation import callbacks_waiting_body, decode_cursor, encode_cursor, waiting_body
from app.api.validation import CORRELATION_ID
from app.console.blueprint import ID, PAGE, act, asking, bp, confirm, stored_json, text_arg
from app.errors import Conflict, NotFound, ValidationFailed
from app.session import db_session
from core.classify import Fault
from core.reasons import failure_reason
from core.states import TERMINAL, State
from models.base import utcnow
from models.read_models import lists, task_page
from models.task import ExternalTask
from runtime.context import liaison
from service.operator_actions import CALLER_FAULT_WARNING, NotFoundError, cancel_task, client_named, replay_one
from wire.bounded_json import InvalidJson, strict_loads

#: a task page shows at most this many timeline events (the newest are kept)
TIMELINE_LIMIT = 500


@bp.get("/tasks")
def tasks() -> str:
    session = db_session()
    args = request.args
    state = args.get("state") or None
    if state is not None and state not in {s.value for s in State}:
        raise ValidationFailed(f"state: one of {', '.join(s.value for s in State)}")
    provider = text_arg(args, "provider", 100)
    flt = lists.TaskFilter(
        state=state,
        provider=provider,
        client_id=_client_id(text_arg(args, "client", 100)),
        retrying=args.get("retrying") in ("1", "true", "on"),
        correlation_id=text_arg(args, "correlation_id"),
    )
    before = decode_cursor(args["cursor"]) if args.get("cursor") else None
    items = lists.operator_tasks(session, flt, PAGE, before)
    next_args: dict[str, Any] = {k: v for k, v in args.items() if k != "cursor" and v}
    next_url = (
        url_for("console.tasks", **{**next_args, "cursor": encode_cursor(items[-1].id)}) if len(items) == PAGE else None
    )
    return render_template(
        "console/tasks.html",
        items=items,
        callbacks_failing=lists.callbacks_failing_of(session, [t.id for t in items]),
        filters=flt,
        args=args,
        states=[s.value for s in State],
        providers=sorted(liaison().settings.providers),
        next_url=next_url,
        terminal={s.value for s in TERMINAL},
    )


def _task(task_id: int) -> ExternalTask:
    task = task_page.task_without_json(db_session(), task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    return task


@bp.get(f"/tasks/<{ID}:task_id>")
def task(task_id: int) -> str:
    page = task_page.task_page(db_session(), task_id, utcnow(), TIMELINE_LIMIT)
    if page is None:
        raise NotFound(f"no task {task_id}")
    found = page.task
    # a task the vendor failed has no ``last_error`` of ours: its reason is its outcome's
    failed = found.state == State.FAILED
    reason = outcome_reason(page.outcome_text, liaison().settings.max_json_depth) if failed else None
    return render_template(
        "console/task.html",
        task=found,
        events=page.events,
        total_events=page.total_events,
        outbox=page.outbox,
        letters=page.letters,
        open_letters=[d for d in page.letters if d.state == "open"],
        incidents=page.incidents,
        final=found.state in {s.value for s in TERMINAL},
        retrying=page.retrying,
        callbacks_retrying=page.callbacks_retrying,
        callbacks=page.callbacks,
        callback_kinds=lists.CALLBACK_KINDS,
        error_source=page.error_source,
        failure_reason=reason,
        waiting=waiting_body(found),
        callbacks_waiting=callbacks_waiting_body(page.paused),
        input_text=stored_json(page.input_text),
        outcome_text=stored_json(page.outcome_text),
    )


def outcome_reason(outcome_text: str | None, max_depth: int) -> str | None:
    """Why the vendor failed the task, as its outcome says (``core.reasons.failure_reason``); None
    when the outcome says nothing or cannot be decoded (the page shows it as stored)."""
    if outcome_text is None:
        return None
    try:
        return failure_reason(strict_loads(outcome_text, max_depth=max_depth, what="the stored outcome"))
    except InvalidJson:
        return None


def _client_id(name: str | None) -> int | None:
    if name is None:
        return None
    if "\x00" in name:  # no client has one (and PostgreSQL refuses it in text)
        raise NotFound(f"no client named {name!r}")
    try:
        return client_named(db_session(), name).id
    except NotFoundError as exc:
        raise NotFound(str(exc)) from None


@bp.get("/tasks/<string(maxlength=200):correlation_id>")
def task_named(correlation_id: str) -> BaseResponse:
    """A task by its correlation id (an id of digits only is a task id: ask under the client)."""
    return _open_named(correlation_id, text_arg(request.args, "client", 100))


@bp.get("/clients/<string(maxlength=100):client>/tasks/<string(maxlength=200):correlation_id>")
def client_task(client: str, correlation_id: str) -> BaseResponse:
    """A client's task by its correlation id."""
    return _open_named(correlation_id, client)


def _open_named(correlation_id: str, client: str | None) -> BaseResponse:
    """One task: its page; tasks of several clients: the list of them; none: 404."""
    found = []
    if CORRELATION_ID.fullmatch(correlation_id):
        found = task_page.tasks_named(db_session(), correlation_id, _client_id(client), 2)
    if not found:
        raise NotFound(f"no task {correlation_id}" + (f" of client {client}" if client else ""))
    if len(found) == 1:
        return redirect(url_for("console.task", task_id=found[0].id))
    return redirect(url_for("console.tasks", correlation_id=correlation_id, done="ambiguous"))


@bp.route(f"/tasks/<{ID}:task_id>/cancel", methods=["GET", "POST"])
def task_cancel(task_id: int) -> str | BaseResponse:
    found = _task(task_id)
    if asking():
        return confirm("Cancel task", f"Cancel task {found.correlation_id} of {found.client.name} (now {found.state})?")
    act(cancel_task, task_id)
    return redirect(url_for("console.task", task_id=task_id, done="canceled"))


@bp.route(f"/tasks/<{ID}:task_id>/replay", methods=["GET", "POST"])
def task_replay(task_id: int) -> str | BaseResponse:
    found = _task(task_id)
    letters = task_page.open_task_dead_letters(db_session(), task_id)
    if not letters:
        raise Conflict("this task has no open dead letter")
    if asking():
        ids = ", ".join(str(d.id) for d in letters)
        caller = sum(1 for d in letters if d.fault == Fault.CALLER)
        caution = f"{caller} of them are the caller's fault: {CALLER_FAULT_WARNING}." if caller else None
        return confirm(
            "Replay dead letters", f"Replay the open dead letters of task {found.correlation_id} ({ids})?", caution
        )
    for letter in letters:
        act(replay_one, letter.id)
    return redirect(url_for("console.task", task_id=task_id, done="task_replayed"))
