"""A client's credentials from the CLI, each change in one transaction of its own: API keys (list,
rotate, retire, revoke), disabling and enabling the client, callback signing secrets (add, retire)
and callback origins. ``app/cli/clients.py`` puts these commands in its ``clients`` group.

A new API key or callback secret is printed once and then exists only as a hash (keys) or in the
database (secrets, which must sign); nothing here logs either."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from flask.cli import AppGroup
from sqlalchemy.orm import Session

from app.cli.output import echo_json, emit, json_option
from models.base import utcnow
from models.client import ApiKey, Client
from runtime.context import liaison
from service import credentials

T = TypeVar("T")

#: where these commands wait for ``app/cli/clients.py`` to take them into its group (an AppGroup's
#: commands run in the app context, as the group's own do)
_here = AppGroup("clients")


def in_transaction(action: Callable[[Session], T]) -> T:
    """Run ``action`` in one transaction; a lifecycle refusal becomes a one-line CLI error."""
    try:
        with liaison().db.transaction() as session:
            return action(session)
    except credentials.CredentialError as exc:
        raise click.ClickException(str(exc)) from None


def on_client(name: str, action: Callable[[Session, Client], T]) -> T:
    """``action`` on the client named ``name``, its row locked, in one transaction."""
    return in_transaction(lambda session: action(session, credentials.find_client(session, name, lock=True)))


def key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "prefix": key.prefix,
        "state": key.state,
        "created_at": key.created_at.isoformat(),
        "retired_at": key.retired_at and key.retired_at.isoformat(),
        "revoked_at": key.revoked_at and key.revoked_at.isoformat(),
    }


# --- API keys -------------------------------------------------------------------------------------


@_here.command("keys")
@click.argument("name")
@json_option
def clients_keys(name: str, as_json: bool) -> None:
    """List a client's API keys (id, display prefix, state), newest first."""
    rows = on_client(name, lambda s, c: [key_row(k) for k in credentials.keys(s, c)])
    emit(rows, ["id", "prefix", "state", "created_at", "retired_at", "revoked_at"], as_json, "no keys")


@_here.command("rotate-key")
@click.argument("name")
@json_option
def clients_rotate_key(name: str, as_json: bool) -> None:
    """Add a new API key (printed once). The old key stays valid until `retire-keys`."""

    def rotate(session: Session, client: Client) -> tuple[str, dict[str, Any], int]:
        new = credentials.rotate_key(session, client, utcnow())
        return new.api_key, key_row(new.row), len(credentials.live_keys(session, client))

    api_key, row, live = on_client(name, rotate)
    if as_json:
        echo_json({"name": name, "api_key": api_key, "key": row, "live_keys": live})
        return
    click.echo(f"new api key: {api_key}  (id {row['id']}, prefix {row['prefix']})")
    click.echo(
        f"{name} has {live} valid key(s); run `clients retire-keys {name}` once the domain app uses the new one."
    )


@_here.command("retire-keys")
@click.argument("name")
@json_option
def clients_retire_keys(name: str, as_json: bool) -> None:
    """Retire every API key of the client but the newest (they get 401 from now on)."""
    retired = on_client(name, lambda s, c: [key_row(k) for k in credentials.retire_keys(s, c, utcnow())])
    if as_json:
        echo_json({"name": name, "retired": retired})
        return
    click.echo(
        f"retired {len(retired)} key(s) of {name}: {', '.join(str(k['prefix'] or k['id']) for k in retired) or '-'}"
    )


@_here.command("revoke-key")
@click.argument("name")
@click.argument("key")
@json_option
def clients_revoke_key(name: str, key: str, as_json: bool) -> None:
    """Revoke one API key at once; KEY is its id or its display prefix (see `clients keys`)."""

    def revoke(session: Session, client: Client) -> tuple[dict[str, Any], int]:
        row = key_row(credentials.revoke_key(session, client, key, utcnow()))
        return row, len(credentials.live_keys(session, client))

    row, live = on_client(name, revoke)
    if as_json:
        echo_json({"name": name, "key": row, "live_keys": live})
        return
    click.echo(f"revoked key {row['id']} ({row['prefix'] or 'no prefix'}) of {name}; {live} valid key(s) left")
    if not live:
        click.echo(f"{name} has no valid key now: `clients rotate-key {name}` makes one.")


# --- disable / enable -----------------------------------------------------------------------------


def _set_disabled(name: str, disabled: bool, as_json: bool) -> None:
    on_client(name, lambda s, c: credentials.set_disabled(c, disabled, utcnow()))
    if as_json:
        echo_json({"name": name, "disabled": disabled})
        return
    now = "disabled: its API requests get 403; tasks in flight still finish and relay" if disabled else "enabled"
    click.echo(f"{name} is {now}")


@_here.command("disable")
@click.argument("name")
@json_option
def clients_disable(name: str, as_json: bool) -> None:
    """Refuse the client's API requests (403). Its tasks in flight still finish and are relayed."""
    _set_disabled(name, True, as_json)


@_here.command("enable")
@click.argument("name")
@json_option
def clients_enable(name: str, as_json: bool) -> None:
    """Accept the client's API requests again."""
    _set_disabled(name, False, as_json)


# --- callback secrets -----------------------------------------------------------------------------


@_here.command("add-secret")
@click.argument("name")
@json_option
def clients_add_secret(name: str, as_json: bool) -> None:
    """Add a callback signing secret (printed once). Callbacks are signed with every secret, so the
    domain app can switch to the new one at its pace; then run `retire-secrets`."""
    secret, count = on_client(name, lambda s, c: (credentials.add_secret(c), len(c.callback_secrets)))
    if as_json:
        echo_json({"name": name, "callback_secret": secret, "secrets": count})
        return
    click.echo(f"new callback secret: {secret}")
    click.echo(
        f"{name} now signs callbacks with {count} secret(s); run `clients retire-secrets {name}` "
        "once the domain app verifies with the new one."
    )


@_here.command("retire-secrets")
@click.argument("name")
@json_option
def clients_retire_secrets(name: str, as_json: bool) -> None:
    """Keep only the newest callback secret (the last one added); the older ones stop signing."""
    retired = on_client(name, lambda s, c: credentials.retire_secrets(c))
    if as_json:
        echo_json({"name": name, "retired": retired, "secrets": 1})
        return
    click.echo(f"retired {retired} secret(s) of {name}; callbacks are signed with the newest only")


# --- callback origins -----------------------------------------------------------------------------


@_here.command("origins")
@click.argument("name")
@click.option("--add", "add", multiple=True, help="Allow callbacks to scheme://host[:port] (repeatable).")
@click.option("--remove", "remove", multiple=True, help="Stop allowing an origin (repeatable).")
@json_option
def clients_origins(name: str, add: tuple[str, ...], remove: tuple[str, ...], as_json: bool) -> None:
    """List (no option) or change the client's callback origins. With none registered, callback URLs
    are not restricted; with some, a task's callback_url outside them is refused (422)."""
    origins = on_client(name, lambda s, c: credentials.change_origins(c, add, remove))
    if as_json:
        echo_json({"name": name, "origins": origins})
        return
    click.echo("\n".join(origins) if origins else f"{name} has no callback origins: callback URLs are not restricted")


#: what ``clients`` gets from here, in its group
COMMANDS = tuple(_here.commands.values())
