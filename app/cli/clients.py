"""Clients: the domain apps allowed to submit tasks, and their credentials' lifecycle.

A new API key or callback secret is printed once and then exists only as a hash (keys) or in the
database (secrets, which must sign); nothing here logs either."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
from flask.cli import AppGroup
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.cli.output import emit, emit_one, json_option
from core.outbound_guard import Refused, check_offline
from core.urls import strip_url
from models.base import utcnow
from models.client import ApiKey, Client
from service import credentials
from workers.runtime import liaison

T = TypeVar("T")


def register(group: AppGroup) -> None:
    group.add_command(clients_group)


@click.group("clients", cls=AppGroup)
def clients_group() -> None:
    """Domain apps allowed to submit tasks; their API keys, callback secrets and origins."""


def _in_transaction(action: Callable[[Session], T]) -> T:
    """Run ``action`` in one transaction; a lifecycle refusal becomes a one-line CLI error."""
    try:
        with liaison().db.transaction() as session:
            return action(session)
    except credentials.CredentialError as exc:
        raise click.ClickException(str(exc)) from None


def _on_client(name: str, action: Callable[[Session, Client], T]) -> T:
    return _in_transaction(lambda session: action(session, credentials.find_client(session, name, lock=True)))


def key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "prefix": key.prefix,
        "state": key.state,
        "created_at": key.created_at.isoformat(),
        "retired_at": key.retired_at and key.retired_at.isoformat(),
        "revoked_at": key.revoked_at and key.revoked_at.isoformat(),
    }


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value))


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
            raise click.ClickException(f"--callback-url refused by the outbound guard: {exc}") from None

    def create(session: Session) -> tuple[str, str]:
        client, key, secret = credentials.create_client(session, name, callback_url, origins, utcnow())
        if channel is not None:
            credentials.set_channel(client, channel)
        return key.api_key, secret

    api_key, secret = _in_transaction(create)
    if as_json:
        _echo_json({"name": name, "api_key": api_key, "callback_secret": secret})
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
    _on_client(name, lambda session, client: credentials.set_channel(client, None if channel == "none" else channel))
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
            for c in session.scalars(select(Client).order_by(Client.name))
        ]

    emit(
        _in_transaction(rows),
        ["name", "callback_url", "secrets", "keys", "origins", "channel", "disabled", "created_at"],
        as_json,
        "no clients yet",
    )


# --- API keys -------------------------------------------------------------------------------------


@clients_group.command("keys")
@click.argument("name")
@json_option
def clients_keys(name: str, as_json: bool) -> None:
    """List a client's API keys (id, display prefix, state), newest first."""
    rows = _on_client(name, lambda s, c: [key_row(k) for k in credentials.keys(s, c)])
    emit(rows, ["id", "prefix", "state", "created_at", "retired_at", "revoked_at"], as_json, "no keys")


@clients_group.command("rotate-key")
@click.argument("name")
@json_option
def clients_rotate_key(name: str, as_json: bool) -> None:
    """Add a new API key (printed once). The old key stays valid until `retire-keys`."""

    def rotate(session: Session, client: Client) -> tuple[str, dict[str, Any], int]:
        new = credentials.rotate_key(session, client, utcnow())
        return new.api_key, key_row(new.row), len(credentials.live_keys(session, client))

    api_key, row, live = _on_client(name, rotate)
    if as_json:
        _echo_json({"name": name, "api_key": api_key, "key": row, "live_keys": live})
        return
    click.echo(f"new api key: {api_key}  (id {row['id']}, prefix {row['prefix']})")
    click.echo(
        f"{name} has {live} valid key(s); run `clients retire-keys {name}` once the domain app uses the new one."
    )


@clients_group.command("retire-keys")
@click.argument("name")
@json_option
def clients_retire_keys(name: str, as_json: bool) -> None:
    """Retire every API key of the client but the newest (they get 401 from now on)."""
    retired = _on_client(name, lambda s, c: [key_row(k) for k in credentials.retire_keys(s, c, utcnow())])
    if as_json:
        _echo_json({"name": name, "retired": retired})
        return
    click.echo(
        f"retired {len(retired)} key(s) of {name}: {', '.join(str(k['prefix'] or k['id']) for k in retired) or '-'}"
    )


@clients_group.command("revoke-key")
@click.argument("name")
@click.argument("key")
@json_option
def clients_revoke_key(name: str, key: str, as_json: bool) -> None:
    """Revoke one API key at once; KEY is its id or its display prefix (see `clients keys`)."""

    def revoke(session: Session, client: Client) -> tuple[dict[str, Any], int]:
        row = key_row(credentials.revoke_key(session, client, key, utcnow()))
        return row, len(credentials.live_keys(session, client))

    row, live = _on_client(name, revoke)
    if as_json:
        _echo_json({"name": name, "key": row, "live_keys": live})
        return
    click.echo(f"revoked key {row['id']} ({row['prefix'] or 'no prefix'}) of {name}; {live} valid key(s) left")
    if not live:
        click.echo(f"{name} has no valid key now: `clients rotate-key {name}` makes one.")


# --- disable / enable -----------------------------------------------------------------------------


def _set_disabled(name: str, disabled: bool, as_json: bool) -> None:
    _on_client(name, lambda s, c: credentials.set_disabled(c, disabled, utcnow()))
    if as_json:
        _echo_json({"name": name, "disabled": disabled})
        return
    now = "disabled: its API requests get 403; tasks in flight still finish and relay" if disabled else "enabled"
    click.echo(f"{name} is {now}")


@clients_group.command("disable")
@click.argument("name")
@json_option
def clients_disable(name: str, as_json: bool) -> None:
    """Refuse the client's API requests (403). Its tasks in flight still finish and are relayed."""
    _set_disabled(name, True, as_json)


@clients_group.command("enable")
@click.argument("name")
@json_option
def clients_enable(name: str, as_json: bool) -> None:
    """Accept the client's API requests again."""
    _set_disabled(name, False, as_json)


# --- callback secrets -----------------------------------------------------------------------------


@clients_group.command("add-secret")
@click.argument("name")
@json_option
def clients_add_secret(name: str, as_json: bool) -> None:
    """Add a callback signing secret (printed once). Callbacks are signed with every secret, so the
    domain app can switch to the new one at its pace; then run `retire-secrets`."""
    secret, count = _on_client(name, lambda s, c: (credentials.add_secret(c), len(c.callback_secrets)))
    if as_json:
        _echo_json({"name": name, "callback_secret": secret, "secrets": count})
        return
    click.echo(f"new callback secret: {secret}")
    click.echo(
        f"{name} now signs callbacks with {count} secret(s); run `clients retire-secrets {name}` "
        "once the domain app verifies with the new one."
    )


@clients_group.command("retire-secrets")
@click.argument("name")
@json_option
def clients_retire_secrets(name: str, as_json: bool) -> None:
    """Keep only the newest callback secret (the last one added); the older ones stop signing."""
    retired = _on_client(name, lambda s, c: credentials.retire_secrets(c))
    if as_json:
        _echo_json({"name": name, "retired": retired, "secrets": 1})
        return
    click.echo(f"retired {retired} secret(s) of {name}; callbacks are signed with the newest only")


# --- callback origins -----------------------------------------------------------------------------


@clients_group.command("origins")
@click.argument("name")
@click.option("--add", "add", multiple=True, help="Allow callbacks to scheme://host[:port] (repeatable).")
@click.option("--remove", "remove", multiple=True, help="Stop allowing an origin (repeatable).")
@json_option
def clients_origins(name: str, add: tuple[str, ...], remove: tuple[str, ...], as_json: bool) -> None:
    """List (no option) or change the client's callback origins. With none registered, callback URLs
    are not restricted; with some, a task's callback_url outside them is refused (422)."""
    origins = _on_client(name, lambda s, c: credentials.change_origins(c, add, remove))
    if as_json:
        _echo_json({"name": name, "origins": origins})
        return
    click.echo("\n".join(origins) if origins else f"{name} has no callback origins: callback URLs are not restricted")


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
        for attr, value in (
            ("weight", weight),
            ("default_priority", priority),
            ("concurrency_key_limit", concurrency_key_limit),
        ):
            if value is not None:
                setattr(client, attr, value)
        row = {
            "name": name,
            "submit_rate_per_s": client.submit_rate_per_s
            if client.submit_rate_per_s is not None
            else settings.client_submit_rate_per_s,
            "submit_burst": client.submit_burst if client.submit_burst is not None else settings.client_submit_burst,
            "max_open_tasks": client.max_open_tasks
            if client.max_open_tasks is not None
            else settings.client_max_open_tasks,
            "overridden": [
                k for k in ("submit_rate_per_s", "submit_burst", "max_open_tasks") if getattr(client, k) is not None
            ],
            "weight": client.weight,
            "default_priority": client.default_priority,
            "concurrency_key_limit": client.concurrency_key_limit,
        }
    emit_one(row, as_json)
