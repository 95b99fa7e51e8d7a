"""The operators' Flask CLI: ``flask --app app liaison <command>``."""

from __future__ import annotations

import json
from pathlib import Path

import click
from flask import current_app
from flask.cli import AppGroup
from sqlalchemy import select

from app.extensions import liaison
from models.client import Client, generate_api_key, hash_api_key
from webhooks.signing import generate_secret

group = AppGroup("liaison", help="Operate Liaison: clients, database, maintenance, demo.")


@group.group("db")
def db_group() -> None:
    """Database schema (Alembic migrations)."""


def alembic_config(database_url: str):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    root = Path(__file__).resolve().parent.parent
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["skip_logging"] = True
    return config


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (what the Procfile's release step runs)."""
    from alembic import command

    command.upgrade(alembic_config(liaison().settings.database_url), "head")
    click.echo("database is at the latest migration")


@group.group("clients")
def clients_group() -> None:
    """Domain apps allowed to submit tasks."""


@clients_group.command("create")
@click.argument("name")
@click.option("--callback-url", help="Default URL for this client's callbacks.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def clients_create(name: str, callback_url: str | None, as_json: bool) -> None:
    """Create a client and print its API key and callback signing secret (shown only this once)."""
    api_key, secret = generate_api_key(), generate_secret()
    with liaison().db.transaction() as session:
        if session.scalar(select(Client).where(Client.name == name)) is not None:
            raise click.ClickException(f"a client named {name!r} exists already")
        session.add(Client(name=name, api_key_hash=hash_api_key(api_key), callback_secrets=[secret], callback_url=callback_url))
    if as_json:
        click.echo(json.dumps({"name": name, "api_key": api_key, "callback_secret": secret}))
        return
    click.echo(f"client:          {name}")
    click.echo(f"api key:         {api_key}")
    click.echo(f"callback secret: {secret}")
    click.echo("Store both now: the API key is kept only as a hash and will not be shown again.")


@clients_group.command("list")
def clients_list() -> None:
    """List clients (names and callback URLs; never keys or secrets)."""
    with liaison().db.transaction() as session:
        for client in session.scalars(select(Client).order_by(Client.name)):
            click.echo(f"{client.name}\t{client.callback_url or '-'}\t{len(client.callback_secrets)} secret(s)")


@group.command("sweep-outbox")
def sweep_outbox() -> None:
    """Publish outbox rows the broker never got (what beat runs every 30 s)."""
    from models.base import utcnow

    ctx = liaison()
    n = ctx.publisher.sweep(utcnow(), ctx.settings.outbox_grace_s, ctx.settings.outbox_lease_s)
    click.echo(f"re-published {n} outbox rows")


@group.command("demo")
@click.option("--web-url", default="http://127.0.0.1:5000", show_default=True, help="Liaison's web process.")
@click.option("--vendor-url", default="http://127.0.0.1:5001", show_default=True, help="The vendor simulator.")
@click.option("--timeout", default=180, show_default=True, help="Seconds to wait for every task to finish.")
def demo(web_url: str, vendor_url: str, timeout: int) -> None:
    """Submit a handful of tasks (some set to fail) and follow each one to its final state."""
    from app.demo import run_demo

    ok = run_demo(current_app._get_current_object(), web_url=web_url, vendor_url=vendor_url, timeout_s=timeout)
    if not ok:
        raise SystemExit(1)
