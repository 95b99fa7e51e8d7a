"""Tasks across all clients, for operators: one with its newest timeline events, the newest tasks,
those retrying right now (the ``tasks`` group)."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from app.api.representation import operator_task_body, task_body
from app.cli.output import emit, emit_one, json_option
from core.states import State
from models.read_models import lists, task_page
from runtime.context import liaison
from service.operator_actions import Ambiguous, NotFoundError, client_named, task_for_operator

#: ``tasks show`` prints at most this many timeline events by default, the newest (as the console)
TIMELINE_LIMIT = 500


def register(group: AppGroup) -> None:
    group.add_command(tasks)


@click.group("tasks", cls=AppGroup)
def tasks() -> None:
    """Tasks across all clients."""


@tasks.command("show")
@click.argument("correlation_id")
@click.option("--client", "client_name", help="Whose task (required when several clients use this correlation id).")
@click.option(
    "--events",
    "most",
    type=click.IntRange(min=1),
    default=TIMELINE_LIMIT,
    show_default=True,
    help="Show at most this many timeline events, the newest.",
)
@json_option
def tasks_show(correlation_id: str, client_name: str | None, most: int, as_json: bool) -> None:
    """One task with its timeline (every request, attempt, event and callback): the newest events,
    and how many it has in all (``timeline_total``) when that is more."""
    with liaison().db.transaction() as session:
        try:
            task = task_for_operator(session, correlation_id, client_name)
        except (NotFoundError, Ambiguous) as exc:
            raise click.ClickException(str(exc)) from None
        events, total = task_page.timeline(session, task.id, most)
        body = task_body(task, events)
        body["timeline_total"] = total
        body["client"] = task.client.name
        body["reference"] = task.reference  # what the vendor knows it by
    if as_json:
        emit_one(body, True)
        return
    timeline = body.pop("timeline")
    emit_one(body, False)
    click.echo("")
    if total > len(timeline):
        click.echo(f"the newest {len(timeline)} of {total} events (--events N shows more)")
    emit([{"at": e["at"], "kind": e["kind"], "detail": e["detail"]} for e in timeline], ["at", "kind", "detail"], False)


@tasks.command("list")
@click.option("--state", type=click.Choice([s.value for s in State]), help="Only tasks in this state.")
@click.option("--client", "client_name", help="Only this client's tasks.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
def tasks_list(state: str | None, client_name: str | None, limit: int, as_json: bool) -> None:
    """Newest tasks first."""
    with liaison().db.transaction() as session:
        try:
            client_id = client_named(session, client_name).id if client_name else None
        except NotFoundError as exc:
            raise click.ClickException(str(exc)) from None
        found = lists.newest_tasks(session, limit, client_id=client_id, state=state or None, with_client=True)
        rows = [operator_task_body(t) for t in found]
    emit(
        rows,
        ["correlation_id", "client", "state", "provider", "attempts", "updated_at", "last_error"],
        as_json,
        "no tasks",
    )


@tasks.command("retrying")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
def tasks_retrying(limit: int, as_json: bool) -> None:
    """Tasks retrying right now: a vendor call or a callback failing (final tasks too)."""
    with liaison().db.transaction() as session:
        rows = [operator_task_body(t) for t in lists.retrying_tasks(session, limit)]
    emit(
        rows,
        ["correlation_id", "client", "state", "provider", "attempts", "next_attempt_at", "last_error"],
        as_json,
        "no task is retrying",
    )
