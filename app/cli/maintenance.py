"""Maintenance commands: database schema, outbox sweep, pruning, the demo.

The demo plays a domain app with the typed client, ``liaison_client``, a distribution of its own that
a checkout has beside the server's packages but an installed server (``pip install .``) does not: so
``demo`` imports ``app.demo`` when it runs, and says what to install when the client is missing,
rather than every command of the CLI failing to load."""

from __future__ import annotations

import json
import threading

import click
from alembic import command
from flask import current_app
from flask.cli import AppGroup, with_appcontext

from app.cli.output import json_option
from app.observability.migrations import alembic_config
from models.base import utcnow
from models.store.heartbeats import beat_liveness
from runtime.context import liaison
from service.retention import KINDS, Retention
from service.retention import prune as prune_all
from service.retention_export import ExportFailed


def register(group: AppGroup) -> None:
    group.add_command(db_group)
    group.add_command(sweep_outbox)
    group.add_command(prune)
    group.add_command(beat_group)
    group.add_command(demo)


@click.group("db", cls=AppGroup)
def db_group() -> None:
    """Database schema (Alembic migrations)."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (what the Procfile's release step runs)."""
    settings = liaison().settings
    command.upgrade(alembic_config(settings.database_url, settings.database_pooler), "head")
    click.echo("database is at the latest migration")


@click.command("sweep-outbox")
@json_option
@with_appcontext
def sweep_outbox(as_json: bool) -> None:
    """Publish outbox rows the broker never got (what beat runs every 30 s)."""
    ctx = liaison()
    n = ctx.publisher.sweep(utcnow(), ctx.settings.outbox_grace_s, ctx.settings.outbox_lease_s)
    click.echo(json.dumps({"published": n}) if as_json else f"re-published {n} outbox rows")


@click.command("prune")
@with_appcontext
@click.option(
    "--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only this kind (repeatable); default: all."
)
@json_option
def prune(kinds: tuple[str, ...], as_json: bool) -> None:
    """Delete finished work older than its retention (LIAISON_RETENTION_*, LIAISON_PROCESSED_RETENTION_S),
    in batches, showing progress: what beat runs hourly. Exits 1 if the export could not be written
    (that batch was not deleted)."""
    ctx = liaison()
    retention = Retention.from_settings(ctx.settings)
    try:
        removed = prune_all(
            ctx.db,
            utcnow(),
            retention,
            kinds or KINDS,
            progress=lambda kind, n: click.echo(f"  {kind}: removed {n} so far", err=True),
        )
    except ExportFailed as exc:
        raise click.ClickException(f"{exc}; nothing of that batch was deleted") from exc
    if as_json:
        click.echo(json.dumps({"removed": removed}))
    else:
        for kind, n in removed.items():
            click.echo(f"{kind}: removed {n} older than {retention.seconds(kind)}s")


@click.group("beat", cls=AppGroup)
def beat_group() -> None:
    """Beat's liveness."""


@beat_group.command("check")
@with_appcontext
@json_option
def beat_check(as_json: bool) -> None:
    """When beat last ticked; exits 1 when that is stale (3 x its shortest interval) or never."""
    with liaison().db.engine.connect() as conn:
        beat = beat_liveness(conn, utcnow())
    click.echo(json.dumps(beat.as_dict()) if as_json else beat.describe())
    if beat.stale:
        raise SystemExit(1)


@click.command("demo")
@with_appcontext
@click.option("--web-url", default="http://127.0.0.1:5000", show_default=True, help="Liaison's web process.")
@click.option("--vendor-url", default="http://127.0.0.1:5001", show_default=True, help="The vendor simulator.")
@click.option("--timeout", default=180, show_default=True, help="Seconds to wait for every task to finish.")
@click.option(
    "--callback-port",
    default=5002,
    show_default=True,
    help="Where the demo's domain app listens on 127.0.0.1; LIAISON_OUTBOUND_ALLOW must list it.",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Then print the demo client's API key and a curl that submits a task, and keep the domain app "
    "listening for its callbacks until Ctrl-C.",
)
def demo(web_url: str, vendor_url: str, timeout: int, callback_port: int, keep: bool) -> None:
    """Submit a handful of tasks (some set to fail) and follow each one to its final state."""
    try:
        from app.demo import run_demo  # needs liaison_client: see the module's docstring
    except ModuleNotFoundError as exc:
        if exc.name != "liaison_client":
            raise
        raise click.ClickException(
            "the demo needs the typed client: pip install ./liaison_client from a checkout (or run bin/demo there)"
        ) from None
    try:
        ok = run_demo(
            current_app._get_current_object(),  # type: ignore[attr-defined]  # the proxy is typed as Flask itself
            web_url=web_url,
            vendor_url=vendor_url,
            timeout_s=timeout,
            callback_port=callback_port,
            keep=threading.Event() if keep else None,  # never set: Ctrl-C ends the wait
        )
    except KeyboardInterrupt:
        if not keep:
            raise
        ok = True  # the way --keep ends
        click.echo()
    if not ok:
        raise SystemExit(1)
