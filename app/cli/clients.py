"""Clients: the domain apps allowed to submit tasks: create, list, their channel and their limits.
Their credentials' commands (keys, secrets, origins, disable) are ``app/cli/client_credentials.py``,
in the same ``clients`` group.

A new API key or callback secret is printed once and then exists only as a hash (keys) or in the
database (secrets, which must sign); nothing here logs either."""

from __future__ import annotations

from typing import Any

import click
from flask.cli import AppGroup
from sqlalchemy.orm import Session

from app.cli.client_credentials import COMMANDS, in_transaction, on_client
from app.cli.output import echo_json, emit, emit_one, json_option
from core.outbound_guard import Refused, check_offline
from core.urls import strip_url
from models.base import utcnow
from models.client import Client
from runtime.context import liaison
from service import client_limits, credentials
from service.client_limits import LimitsChange


def register(group: AppGroup) -> None:
    group.add_command(clients_group)


@click.group("clients", cls=AppGroup)
def clients_group() -> None:
    """Domain apps allowed to submit tasks; their API keys, callback secrets and origins."""


for command in COMMANDS:
    clients_group.add_command(command)


@clients_group.command("create")
@click.argument("name")
@click.option("--callback-url", help="Default URL for this client's callbacks.")
@click.option("--origin", "origins", multiple=True, help="Allowed callback origin scheme://host[:port] (repeatable).")
@click.option(
    "--channel",
    type=click.Choice(["amqp", "redis"]),
    help="Commands and events over this broker too (or instead of HTTP callbacks, with no --callback-url).",
)
@json_option
def clients_create(
    name: str, callback_url: str | None, origins: tuple[str, ...], channel: str | None, as_json: bool
) -> None:
    """Create a client and print its API key and callback signing secret (shown only this once)."""
    if callback_url is not None:
        try:  # what the outbound guard would refuse at every delivery is refused now
            check_offline(callback_url, liaison().settings.outbound_allow)
        except Refused as exc:
            raise click.ClickException(
                f"--callback-url refused by the outbound guard: {exc.reason} (a callback must reach a public "
                "address; LIAISON_OUTBOUND_ALLOW lets a listed host:port through, as bin/demo does for its own "
                "domain app)"
            ) from None

    def create(session: Session) -> tuple[str, str]:
        client, key, secret = credentials.create_client(session, name, callback_url, origins, utcnow())
        if channel is not None:
            credentials.set_channel(client, channel)
        return key.api_key, secret

    api_key, secret = in_transaction(create)
    if as_json:
        echo_json({"name": name, "api_key": api_key, "callback_secret": secret})
        return
    click.echo(f"client:          {name}")
    click.echo(f"api key:         {api_key}")
    click.echo(f"callback secret: {secret}")
    click.echo("Store both now: the API key is kept only as a hash and will not be shown again.")


@clients_group.command("set-channel")
@click.argument("name")
@click.argument("channel", type=click.Choice(["amqp", "redis", "none"]))
def clients_set_channel(name: str, channel: str) -> None:
    """Put a client on a broker channel (amqp or redis), or back on HTTP only (none). Its tasks
    submitted from then on send their events there; channel-commands reads its commands within 10 s."""
    on_client(name, lambda session, client: credentials.set_channel(client, None if channel == "none" else channel))
    click.echo(f"client {name}: channel {channel}")


@clients_group.command("list")
@json_option
def clients_list(as_json: bool) -> None:
    """List clients (names, callback URLs, state; never keys or secrets)."""

    def rows(session: Session) -> list[dict[str, Any]]:
        return [
            {
                "name": c.name,
                "callback_url": c.callback_url and strip_url(c.callback_url),
                "secrets": len(c.callback_secrets),
                "keys": len(credentials.live_keys(session, c)),
                "origins": ",".join(c.callback_origins) or None,
                "channel": c.channel,
                "disabled": c.disabled_at is not None,
                "created_at": c.created_at.isoformat(),
            }
            for c in credentials.clients(session)
        ]

    emit(
        in_transaction(rows),
        ["name", "callback_url", "secrets", "keys", "origins", "channel", "disabled", "created_at"],
        as_json,
        "no clients yet",
    )


@clients_group.command("limits")
@click.argument("name")
@click.option("--submit-rate", type=click.FloatRange(min=0.001), help="Submits per second (sustained).")
@click.option("--burst", type=click.IntRange(min=1), help="Submits at once after a quiet spell.")
@click.option("--max-open", type=click.IntRange(min=1), help="Non-final tasks the client may have.")
@click.option("--weight", type=click.IntRange(min=1, max=100), help="Its share of vendor capacity and dispatch (1).")
@click.option(
    "--priority", type=click.IntRange(min=1, max=5), help="The priority of its tasks that name none (3; 1 most urgent)."
)
@click.option(
    "--concurrency-key-limit", type=click.IntRange(min=1), help="Its tasks with one concurrency key open at once (1)."
)
@click.option("--default", "reset", is_flag=True, help="Drop the overrides: the LIAISON_CLIENT_* defaults apply.")
@json_option
def clients_limits(
    name: str,
    submit_rate: float | None,
    burst: int | None,
    max_open: int | None,
    weight: int | None,
    priority: int | None,
    concurrency_key_limit: int | None,
    reset: bool,
    as_json: bool,
) -> None:
    """Show or override a client's limits (issue 8) and its dispatch terms (issue 20: weight, default
    priority, concurrency-key limit); options not given stay as they are. --default drops the rate
    and open-task overrides only."""
    change = LimitsChange(submit_rate, burst, max_open, weight, priority, concurrency_key_limit, reset)

    def apply(session: Session, client: Client) -> dict[str, Any]:
        client_limits.change_limits(client, change)
        return {"name": name, **client_limits.limits(client, liaison().settings)}

    row = on_client(name, apply)
    emit_one(row, as_json)
