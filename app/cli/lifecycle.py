"""Lifecycle: orphan events, reconciliation and deadline checks on demand."""

from __future__ import annotations

import dataclasses
import json

import click
from flask.cli import AppGroup, with_appcontext

from app.api.representation import orphan_body
from app.cli.output import cli_actor, emit, json_option
from models.base import utcnow
from models.read_models import lists
from runtime.context import liaison
from service.operator_actions import Ambiguous, NotFoundError, NotReplayable, attach_orphan_to, discard_orphan_one
from workers.deadlines import check_deadlines as run_check_deadlines
from workers.reconcile import reconcile as run_reconcile


def register(group: AppGroup) -> None:
    for command in (orphans, reconcile, check_deadlines):
        group.add_command(command)


@click.group("orphans", cls=AppGroup)
def orphans() -> None:
    """Vendor events that matched no task: list, attach to a task, discard."""


@orphans.command("list")
@click.option("--state", type=click.Choice(["open", "resolved", "discarded", "all"]), default="open", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
def orphans_list(state: str, limit: int, as_json: bool) -> None:
    """List orphan events, oldest first."""
    with liaison().db.transaction() as session:
        rows = [orphan_body(o) for o in lists.orphans(session, None if state == "all" else state, limit)]
    for row in rows:
        row["type"] = row["payload"].get("type")
    emit(
        rows,
        ["id", "source", "type", "vendor_job_id", "state", "received_at", "message_id"],
        as_json,
        "no orphan events",
    )


@orphans.command("attach")
@click.argument("orphan_id", type=int)
@click.argument("correlation_id")
@click.option("--client", "client_name", help="Whose task (required when several clients use this correlation id).")
def orphans_attach(orphan_id: int, correlation_id: str, client_name: str | None) -> None:
    """Bind an orphan event to the task with CORRELATION_ID and apply it."""
    try:
        attach_orphan_to(liaison().db, orphan_id, correlation_id, utcnow(), client_name=client_name, actor=cli_actor())
    except (NotFoundError, NotReplayable, Ambiguous) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"orphan {orphan_id} attached to {correlation_id} and applied")


@orphans.command("discard")
@click.argument("orphan_id", type=int)
def orphans_discard(orphan_id: int) -> None:
    """Close an orphan event without applying it (kept for the record)."""
    try:
        discard_orphan_one(liaison().db, orphan_id, utcnow(), actor=cli_actor())
    except (NotFoundError, NotReplayable) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"orphan {orphan_id} discarded")


@click.command("reconcile")
@json_option
@with_appcontext
def reconcile(as_json: bool) -> None:
    """Ask each provider about tasks quiet too long and apply what it says; re-drive stuck submits
    (what beat runs every 5 minutes, here and now)."""
    report = run_reconcile(liaison(), utcnow())
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report)))
        return
    click.echo(
        f"checked {report.checked} tasks ({', '.join(f'{k}: {v}' for k, v in report.by_provider.items()) or 'none'}), "
        f"applied {report.applied}, unknown jobs {report.unknown}, errors {report.errors}, "
        f"re-driven submits {report.redriven}"
    )
    if report.skipped:
        click.echo(f"skipped (another run holds their lease): {', '.join(report.skipped)}")
    if report.unfinished:
        click.echo(f"stopped at the run's time budget, the rest is for the next run: {', '.join(report.unfinished)}")


@click.command("check-deadlines")
@json_option
@with_appcontext
def check_deadlines(as_json: bool) -> None:
    """Tasks past their acceptance or execution deadline (once per deadline), or silent past their
    heartbeat: what beat runs every minute, here and now. Each is escalated once a worker has asked
    the vendor (a final answer is applied instead); ``escalated`` counts them as they come due."""
    total = run_check_deadlines(
        liaison(), utcnow(), max_batches=10_000, progress=lambda n: click.echo(f"  {n} due so far", err=True)
    )
    message = f"{total} deadlines or heartbeats due: the vendor is asked, then escalated if not final"
    click.echo(json.dumps({"escalated": total}) if as_json else message)
