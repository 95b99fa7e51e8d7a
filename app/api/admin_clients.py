"""Operators' API for clients' credentials (admin token): API keys (rotate, retire, revoke),
disable/enable, callback secrets (add, retire all but the newest) and callback origins.

A new key or secret appears once, in the response that made it (``Cache-Control: no-store``); it
is stored only as a hash (keys) and never logged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import Blueprint, Response, jsonify
from sqlalchemy.orm import Session

from app.api.admin_params import json_object
from app.api.contract import ChangeOrigins, Channel, as_list, validated
from app.auth import require_admin
from app.errors import Conflict, NotFound, ValidationFailed
from app.session import db_session
from models.base import utcnow
from models.client import ApiKey, Client
from service import credentials

bp = Blueprint("admin_clients", __name__, url_prefix="/admin/v1/clients")
bp.before_request(require_admin)

T = TypeVar("T")


def _time(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def key_body(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "prefix": key.prefix,
        "state": key.state,
        "created_at": _time(key.created_at),
        "retired_at": _time(key.retired_at),
        "revoked_at": _time(key.revoked_at),
    }


def client_body(session: Session, client: Client) -> dict[str, Any]:
    """A client as operators see it: never a key or a secret, only how many there are."""
    return {
        "name": client.name,
        "callback_url": client.callback_url,
        "callback_origins": client.callback_origins,
        "disabled": client.disabled_at is not None,
        "disabled_at": _time(client.disabled_at),
        "channel": client.channel,
        "secrets": len(client.callback_secrets),
        "keys": [key_body(k) for k in credentials.keys(session, client)],
        "weight": client.weight,
        "default_priority": client.default_priority,
        "concurrency_key_limit": client.concurrency_key_limit,
        "created_at": _time(client.created_at),
    }


def _change(name: str, action: Callable[[Session, Client], T], *, lock: bool = True) -> T:
    """Lock the client (unless only reading), apply ``action``, commit; lifecycle refusals become
    problem+json."""
    session = db_session()
    try:
        result = action(session, credentials.find_client(session, name, lock=lock))
        session.commit()
        return result
    except credentials.ClientNotFound as exc:
        session.rollback()
        raise NotFound(str(exc)) from None
    except credentials.KeyNotFound as exc:
        session.rollback()
        raise NotFound(str(exc)) from None
    except credentials.OriginsConflict as exc:  # what the client would hold, not the form of the request
        session.rollback()
        raise Conflict(str(exc), errors=[{"field": "origin", "message": str(exc)}]) from None
    except credentials.OriginRefused as exc:
        session.rollback()
        raise ValidationFailed(str(exc), errors=[{"field": "origin", "message": str(exc)}]) from None
    except credentials.CredentialError as exc:
        session.rollback()
        raise Conflict(str(exc)) from None


def _once(body: dict[str, Any], status: int = 200) -> tuple[Response, int, dict[str, str]]:
    """A response carrying a new credential: never cached anywhere on the way."""
    return jsonify(body), status, {"Cache-Control": "no-store"}


@bp.get("")
def list_clients() -> Response:
    session = db_session()
    return jsonify({"items": [client_body(session, c) for c in credentials.clients(session)]})


@bp.get("/<name>")
def show_client(name: str) -> Response:
    return jsonify(_change(name, client_body, lock=False))


@bp.post("/<name>/keys")
def rotate_key(name: str) -> tuple[Response, int, dict[str, str]]:
    """A new API key (in this response only); the old keys stay valid until retired."""
    new = _change(name, lambda s, c: credentials.rotate_key(s, c, utcnow()))
    return _once({"api_key": new.api_key, "key": key_body(new.row)}, 201)


@bp.post("/<name>/keys/retire")
def retire_keys(name: str) -> Response:
    """Retire every key but the newest."""
    retired = _change(name, lambda s, c: credentials.retire_keys(s, c, utcnow()))
    return jsonify({"retired": [key_body(k) for k in retired]})


@bp.post("/<name>/keys/<key>/revoke")
def revoke_key(name: str, key: str) -> Response:
    """Revoke one key at once, by id or display prefix."""
    return jsonify(key_body(_change(name, lambda s, c: credentials.revoke_key(s, c, key, utcnow()))))


def _set_disabled(session: Session, client: Client, disabled: bool) -> dict[str, Any]:
    credentials.set_disabled(client, disabled, utcnow())
    return client_body(session, client)


@bp.post("/<name>/disable")
def disable(name: str) -> Response:
    """Its API requests get 403 from now on; its tasks in flight still finish and are relayed."""
    return jsonify(_change(name, lambda s, c: _set_disabled(s, c, True)))


@bp.post("/<name>/enable")
def enable(name: str) -> Response:
    return jsonify(_change(name, lambda s, c: _set_disabled(s, c, False)))


@bp.post("/<name>/secrets")
def add_secret(name: str) -> tuple[Response, int, dict[str, str]]:
    """A new callback signing secret (in this response only); callbacks are signed with every one."""
    secret, count = _change(name, lambda s, c: (credentials.add_secret(c), len(c.callback_secrets)))
    return _once({"callback_secret": secret, "secrets": count}, 201)


@bp.post("/<name>/secrets/retire")
def retire_secrets(name: str) -> Response:
    """Keep only the newest callback secret."""
    retired = _change(name, lambda s, c: credentials.retire_secrets(c))
    return jsonify({"retired": retired, "secrets": 1})


@bp.put("/<name>/channel")
def set_channel(name: str) -> Response:
    """Body ``{"channel": "amqp" | "redis" | null}``: the client's broker channel (issue 13)."""
    channel = validated(Channel, json_object(), "bad channel").channel

    def apply(session: Session, client: Client) -> dict[str, Any]:
        credentials.set_channel(client, channel)
        return client_body(session, client)

    return jsonify(_change(name, apply))


@bp.get("/<name>/origins")
def list_origins(name: str) -> Response:
    return jsonify({"origins": _change(name, lambda s, c: list(c.callback_origins), lock=False)})


@bp.post("/<name>/origins")
def change_origins(name: str) -> Response:
    """Body ``{"add": [...], "remove": [...]}``; refused (422) if the client's default callback_url
    would fall outside the result."""
    body = validated(ChangeOrigins, json_object(), "bad origins")
    add, remove = as_list(body.add), as_list(body.remove)
    return jsonify({"origins": _change(name, lambda s, c: credentials.change_origins(c, add, remove))})
