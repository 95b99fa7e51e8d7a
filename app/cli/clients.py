"""Clients: the domain apps allowed to submit tasks."""

from __future__ import annotations

import json

import click
from flask.cli import AppGroup
from sqlalchemy import select

from app.cli.output import emit, emit_one, json_option
from app.extensions import liaison
from models.client import Client, generate_api_key, hash_api_key
from webhooks.signing import generate_secret


def register(group: AppGroup) -> None:
    group.add_command(clients_group)


@click.group("clients", cls=AppGroup)
def clients_group() -> None:
    """Domain apps allowed to submit tasks."""


@clients_group.command("create")
@click.argument("name")
@click.option("--callback-url", help="Default URL for this client's callbacks.")
@json_option
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
@json_option
def clients_list(as_json: bool) -> None:
    """List clients (names and callback URLs; never keys or secrets)."""
    with liaison().db.transaction() as session:
        rows = [
            {"name": c.name, "callback_url": c.callback_url, "secrets": len(c.callback_secrets),
             "created_at": c.created_at.isoformat()}
            for c in session.scalars(select(Client).order_by(Client.name))
        ]
    emit(rows, ["name", "callback_url", "secrets", "created_at"], as_json, "no clients yet")


@clients_group.command("rotate-secret")
@click.argument("name")
@click.option("--keep-old/--drop-old", default=True, show_default=True,
              help="Keep signing with the old secret(s) too while the domain app switches over.")
@json_option
def clients_rotate(name: str, keep_old: bool, as_json: bool) -> None:
    """Add a new callback signing secret (printed once); callbacks carry one signature per secret."""
    secret = generate_secret()
    with liaison().db.transaction() as session:
        client = session.scalar(select(Client).where(Client.name == name).with_for_update())
        if client is None:
            raise click.ClickException(f"no client named {name!r}")
        client.callback_secrets = [secret, *client.callback_secrets] if keep_old else [secret]
        count = len(client.callback_secrets)
    if as_json:
        click.echo(json.dumps({"name": name, "callback_secret": secret, "secrets": count}))
        return
    click.echo(f"new callback secret: {secret}")
    click.echo(f"{name} now signs callbacks with {count} secret(s); run with --drop-old once the domain app has switched.")




@clients_group.command("limits")
@click.argument("name")
@click.option("--submit-rate", type=click.FloatRange(min=0.001), help="Submits per second (sustained).")
@click.option("--burst", type=click.IntRange(min=1), help="Submits at once after a quiet spell.")
@click.option("--max-open", type=click.IntRange(min=1), help="Non-final tasks the client may have.")
@click.option("--default", "reset", is_flag=True, help="Drop the overrides: the LIAISON_CLIENT_* defaults apply.")
@json_option
def clients_limits(name: str, submit_rate: float | None, burst: int | None, max_open: int | None,
                   reset: bool, as_json: bool) -> None:
    """Show or override a client's limits (issue 8); options not given stay as they are."""
    settings = liaison().settings
    with liaison().db.transaction() as session:
        client = session.scalar(select(Client).where(Client.name == name).with_for_update())
        if client is None:
            raise click.ClickException(f"no client named {name!r}")
        if reset:
            client.submit_rate_per_s = client.submit_burst = client.max_open_tasks = None
        if submit_rate is not None:
            client.submit_rate_per_s = submit_rate
        if burst is not None:
            client.submit_burst = burst
        if max_open is not None:
            client.max_open_tasks = max_open
        row = {
            "name": name,
            "submit_rate_per_s": client.submit_rate_per_s if client.submit_rate_per_s is not None else settings.client_submit_rate_per_s,
            "submit_burst": client.submit_burst if client.submit_burst is not None else settings.client_submit_burst,
            "max_open_tasks": client.max_open_tasks if client.max_open_tasks is not None else settings.client_max_open_tasks,
            "overridden": [k for k in ("submit_rate_per_s", "submit_burst", "max_open_tasks") if getattr(client, k) is not None],
        }
    emit_one(row, as_json)
