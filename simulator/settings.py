"""Process-wide settings of the simulator, read once at ``create_app``.

Each key comes from the ``config`` dict given to ``create_app``, else from the environment
variable of the same name. A missing or malformed webhook secret fails loudly at start-up: a
simulator that signs with a broken key would only show up later as confusing 401s elsewhere.

``SIMULATOR_PERSONALITY`` picks the vendor it plays (``simulator.personality``); each takes the
secret in its scheme's form: ``liaison`` a Standard Webhooks ``whsec_<base64>``, ``stripe`` Stripe's
``whsec_…`` used as its text, ``github`` any text; ``poll-only`` and ``token-url`` sign nothing and
need none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.origins import BadOrigin, normalize_origin
from webhooks.signing import SECRET_PREFIX, decode_secret

DEFAULT_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)

LIAISON, STRIPE, GITHUB, POLL_ONLY, TOKEN_URL = "liaison", "stripe", "github", "poll-only", "token-url"
#: The vendors the simulator can play (docs/design.md §5, "The simulator's personalities").
PERSONALITIES = (LIAISON, STRIPE, GITHUB, POLL_ONLY, TOKEN_URL)
#: Personalities whose webhooks go to the one endpoint configured at the vendor (SIMULATOR_WEBHOOK_URL),
#: as Stripe's and GitHub's go to the endpoint registered in their dashboards.
CONFIGURED_TARGET = frozenset({STRIPE, GITHUB})
#: Personalities that sign nothing, so need no secret.
UNSIGNED = frozenset({POLL_ONLY, TOKEN_URL})


class SettingsError(ValueError):
    """The simulator cannot start with this configuration."""


@dataclass(frozen=True)
class Settings:
    webhook_secret: str
    accept_delay_s: float = 0.5
    complete_delay_s: float = 2.0
    webhook_timeout_s: float = 5.0
    #: pauses between re-sends of one webhook; attempts = len(retry_backoff_s) + 1
    retry_backoff_s: tuple[float, ...] = DEFAULT_RETRY_BACKOFF_S
    #: broker mode (simulator.broker): the RabbitMQ whose command queue it consumes; empty = off
    amqp_url: str = ""
    amqp_command_queue: str = "sim.commands"
    #: the vendor it plays: its API's shapes, its webhooks' signature, envelope and destination
    personality: str = LIAISON
    #: stripe, github: where every webhook goes (the endpoint "registered at the vendor")
    webhook_url: str = ""
    #: token-url: the origins a handed callback URL may lie on (canonical); empty = loopback only
    callback_origins: tuple[str, ...] = ()
    #: ``user:password``: every webhook also carries ``Authorization: Basic`` with it (a vendor that
    #: proves its webhooks by basic auth, Liaison's ``basic`` scheme); empty = none
    webhook_basic_auth: str = field(default="", repr=False)


def _lookup(key: str, config: Mapping[str, Any], environ: Mapping[str, str]) -> Any:
    if key in config and config[key] is not None:
        return config[key]
    return environ.get(key)


def _number(key: str, value: Any, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{key} must be a number of seconds, got {value!r}") from None
    if number < 0:
        raise SettingsError(f"{key} must not be negative, got {value!r}")
    return number


def _backoff(key: str, value: Any) -> tuple[float, ...]:
    if value is None or value == "":
        return DEFAULT_RETRY_BACKOFF_S
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(_number(key, item, 0.0) for item in items)
    except TypeError:
        raise SettingsError(f"{key} must be a list of seconds, got {value!r}") from None


def load_settings(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings`; raise :class:`SettingsError` with a message naming the key."""
    config = config or {}
    environ = os.environ if environ is None else environ
    personality = str(_lookup("SIMULATOR_PERSONALITY", config, environ) or LIAISON)
    if personality not in PERSONALITIES:
        raise SettingsError(f"SIMULATOR_PERSONALITY must be one of {', '.join(PERSONALITIES)}")
    secret = str(_lookup("SIMULATOR_WEBHOOK_SECRET", config, environ) or "")
    _check_secret(personality, secret)

    def num(key: str, default: float) -> float:
        return _number(key, _lookup(key, config, environ), default)

    amqp_url = str(_lookup("SIMULATOR_AMQP_URL", config, environ) or "")
    if amqp_url and not amqp_url.startswith(("amqp://", "amqps://")):
        raise SettingsError("SIMULATOR_AMQP_URL must be an amqp:// or amqps:// URL")
    if amqp_url and personality != LIAISON:
        raise SettingsError("SIMULATOR_AMQP_URL (broker mode) plays the liaison personality only")
    webhook_url = str(_lookup("SIMULATOR_WEBHOOK_URL", config, environ) or "")
    if personality in CONFIGURED_TARGET and not webhook_url.startswith(("http://", "https://")):
        raise SettingsError(
            f"SIMULATOR_WEBHOOK_URL (an http(s) URL) is required by the {personality} personality: "
            "its webhooks go to the endpoint registered at the vendor, not to a URL in the request"
        )
    timeout_s = num("SIMULATOR_WEBHOOK_TIMEOUT_S", 5.0)
    if timeout_s <= 0:
        raise SettingsError("SIMULATOR_WEBHOOK_TIMEOUT_S must be greater than 0")
    return Settings(
        webhook_secret=secret,
        accept_delay_s=num("SIMULATOR_ACCEPT_DELAY_S", 0.5),
        complete_delay_s=num("SIMULATOR_COMPLETE_DELAY_S", 2.0),
        webhook_timeout_s=timeout_s,
        retry_backoff_s=_backoff("SIMULATOR_RETRY_BACKOFF_S", _lookup("SIMULATOR_RETRY_BACKOFF_S", config, environ)),
        amqp_url=amqp_url,
        amqp_command_queue=str(_lookup("SIMULATOR_AMQP_COMMAND_QUEUE", config, environ) or "sim.commands"),
        personality=personality,
        webhook_url=webhook_url,
        callback_origins=_origins(_lookup("SIMULATOR_CALLBACK_ORIGINS", config, environ)),
        webhook_basic_auth=_basic_auth(_lookup("SIMULATOR_WEBHOOK_BASIC_AUTH", config, environ)),
    )


def _check_secret(personality: str, secret: str) -> None:
    """The secret in the form the personality's scheme signs with; the message never shows it."""
    if personality in UNSIGNED:
        return
    if not secret:
        raise SettingsError(
            f"SIMULATOR_WEBHOOK_SECRET is required by the {personality} personality (liaison: a whsec_<base64> "
            "secret shared with the webhook receiver, make one with webhooks.signing.generate_secret(); "
            "stripe: a whsec_… secret; github: any text)"
        )
    if personality == LIAISON:
        try:
            decode_secret(secret)
        except ValueError as exc:
            raise SettingsError(f"SIMULATOR_WEBHOOK_SECRET is malformed: {exc}") from None
    elif personality == STRIPE and not secret.startswith(SECRET_PREFIX):
        raise SettingsError("SIMULATOR_WEBHOOK_SECRET is malformed: a Stripe endpoint secret starts with whsec_")


def _basic_auth(value: Any) -> str:
    """``SIMULATOR_WEBHOOK_BASIC_AUTH``: ``user:password`` (both non-empty, no control characters);
    the message never shows the value."""
    if value is None or value == "":
        return ""
    text = str(value)
    user, sep, password = text.partition(":")
    if not sep or not user or not password or not text.isprintable():
        raise SettingsError("SIMULATOR_WEBHOOK_BASIC_AUTH must be user:password (both non-empty)")
    return text


def _origins(value: Any) -> tuple[str, ...]:
    """``SIMULATOR_CALLBACK_ORIGINS``: comma-separated ``http(s)://host[:port]``, canonical."""
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(normalize_origin(str(item).strip()) for item in items if str(item).strip())
    except BadOrigin as exc:
        raise SettingsError(f"SIMULATOR_CALLBACK_ORIGINS: {exc}") from None
