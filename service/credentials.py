"""Clients' credentials and their lifecycle, in the caller's transaction: API keys (rotate with an
overlap, retire, revoke), callback signing secrets (add, retire all but the newest), disabling a
client, and its callback origins. The CLI and the admin API both call these; neither stores nor
logs a key or secret in clear: new ones are returned once, to be shown once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from core.origins import MAX_ORIGINS, BadOrigin, normalize_origin, within
from models.base import utcnow
from models.client import ApiKey, Client, display_prefix, generate_api_key, hash_api_key
from models.store import store_of
from webhooks.signing import generate_secret
from wire.channel_messages import CHANNELS, channel_name_problem

#: Every secret signs every callback; a bound keeps a forgotten rotation from growing headers.
MAX_SECRETS = 5


class CredentialError(Exception):
    """A lifecycle request that cannot be done; the message says why (never a secret)."""


class ClientNotFound(CredentialError):
    pass


class KeyNotFound(CredentialError):
    pass


class OriginRefused(CredentialError):
    """Not an origin (``core.origins.BadOrigin``); the API answers 422."""


class OriginsConflict(OriginRefused):
    """Refused for what the client would end up with, not for the form of what was sent: more than
    ``MAX_ORIGINS`` origins, or its default callback_url outside them; the API answers 409."""


@dataclass(frozen=True)
class NewKey:
    """A key just made: ``api_key`` is shown once and then exists only as ``row.key_hash``."""

    row: ApiKey
    api_key: str


def find_client(session: Session, name: str, *, lock: bool = False) -> Client:
    client = store_of(session).credentials.client_named(session, name, lock=lock)
    if client is None:
        raise ClientNotFound(f"no client named {name!r}")
    return client


def clients(session: Session) -> list[Client]:
    """Every client, by name."""
    return store_of(session).credentials.clients(session)


def authenticate(session: Session, api_key: str) -> Client | None:
    """The client owning this key if the key is live (neither retired nor revoked): one lookup on
    the unique ``key_hash`` index. A disabled client is returned; refusing it is the caller's."""
    return store_of(session).credentials.client_of_key(session, hash_api_key(api_key))


def _add_key(session: Session, client: Client, now: datetime) -> NewKey:
    api_key = generate_api_key()
    row = ApiKey(client_id=client.id, key_hash=hash_api_key(api_key), prefix=display_prefix(api_key), created_at=now)
    session.add(row)
    session.flush()
    return NewKey(row, api_key)


def create_client(
    session: Session, name: str, callback_url: str | None, origins: tuple[str, ...] = (), now: datetime | None = None
) -> tuple[Client, NewKey, str]:
    """A new client with one API key and one callback secret: (client, key, secret)."""
    now = now or utcnow()
    if store_of(session).credentials.name_taken(session, name):
        raise CredentialError(f"a client named {name!r} exists already")
    normalized = _registrable(callback_url, _normalized(origins))
    secret = generate_secret()
    client = Client(
        name=name, callback_secrets=[secret], callback_url=callback_url, callback_origins=normalized, created_at=now
    )
    session.add(client)
    session.flush()
    return client, _add_key(session, client, now), secret


def set_channel(client: Client, channel: str | None) -> None:
    """Put the client on a broker channel (``amqp`` or ``redis``), or back on HTTP only (None).
    Tasks submitted from then on send their events there; tasks already open keep what they had."""
    if channel is not None:
        if channel not in CHANNELS:
            raise CredentialError(f"channel must be one of {', '.join(CHANNELS)}, or none")
        if problem := channel_name_problem(client.name):
            raise CredentialError(problem)
    client.channel = channel


def keys(session: Session, client: Client) -> list[ApiKey]:
    """Every key of the client, newest first (retired and revoked ones too)."""
    return store_of(session).credentials.keys_of(session, client.id)


def live_keys(session: Session, client: Client) -> list[ApiKey]:
    return [k for k in keys(session, client) if k.state == "active"]


def rotate_key(session: Session, client: Client, now: datetime) -> NewKey:
    """A new key; the old ones stay valid until :func:`retire_keys`, so the domain app can switch
    over without a failed request."""
    return _add_key(session, client, now)


def retire_keys(session: Session, client: Client, now: datetime) -> list[ApiKey]:
    """Retire every live key but the newest; returns the keys retired."""
    retired = live_keys(session, client)[1:]
    for key in retired:
        key.retired_at = now
    return retired


def revoke_key(session: Session, client: Client, which: str, now: datetime) -> ApiKey:
    """Revoke one key at once, named by its id or its display prefix (which must be unambiguous)."""
    mine = keys(session, client)
    if which.isdigit():
        matches = [k for k in mine if k.id == int(which)]
    else:
        matches = [k for k in mine if k.prefix and which and k.prefix.startswith(which)]
    if not matches:
        raise KeyNotFound(f"client {client.name!r} has no key {which!r}")
    if len(matches) > 1:
        raise KeyNotFound(f"{which!r} names {len(matches)} keys of {client.name!r}; give the key's id")
    key = matches[0]
    if key.revoked_at is None:
        key.revoked_at = now
    return key


def set_disabled(client: Client, disabled: bool, now: datetime) -> None:
    if disabled and client.disabled_at is None:
        client.disabled_at = now
    elif not disabled:
        client.disabled_at = None


def add_secret(client: Client) -> str:
    """A new callback signing secret, put first; callbacks are signed with every secret, so the
    domain app may verify with the old one or the new one while it switches."""
    if len(client.callback_secrets) >= MAX_SECRETS:
        raise CredentialError(f"client {client.name!r} has {MAX_SECRETS} secrets already; retire the old ones first")
    secret = generate_secret()
    client.callback_secrets = [secret, *client.callback_secrets]
    return secret


def retire_secrets(client: Client) -> int:
    """Keep only the newest secret (the last one added); returns how many were retired."""
    retired = len(client.callback_secrets) - 1
    client.callback_secrets = client.callback_secrets[:1]
    return retired


def _normalized(origins: tuple[str, ...] | list[str]) -> list[str]:
    try:
        return list(dict.fromkeys(normalize_origin(o) for o in origins))
    except BadOrigin as exc:
        raise OriginRefused(str(exc)) from None


def _registrable(callback_url: str | None, origins: list[str]) -> list[str]:
    """``origins`` as a client may hold them: at most ``MAX_ORIGINS``, its default callback_url within."""
    if len(origins) > MAX_ORIGINS:
        raise OriginsConflict(f"at most {MAX_ORIGINS} callback origins")
    if callback_url and not within(callback_url, origins):
        raise OriginsConflict("the client's default callback_url must lie within its callback origins")
    return origins


def change_origins(client: Client, add: tuple[str, ...] = (), remove: tuple[str, ...] = ()) -> list[str]:
    """Add and remove callback origins; refused (``OriginsConflict``) if the client would hold more
    than ``MAX_ORIGINS`` or its default callback_url would fall outside them. Returns the origins
    now registered."""
    gone = set(_normalized(remove))
    result = [o for o in _normalized([*client.callback_origins, *add]) if o not in gone]
    client.callback_origins = _registrable(client.callback_url, result)
    return result


def clients_on_channel(session: Session, channel: str) -> list[tuple[int, str]]:
    """(id, name) of every client whose tasks' events go to ``channel`` (``amqp`` or ``redis``)."""
    return store_of(session).credentials.clients_on_channel(session, channel)
