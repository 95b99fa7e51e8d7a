"""Process-wide settings of the simulator, read once at ``create_app``.

Each key comes from the ``config`` dict given to ``create_app``, else from the environment
variable of the same name. A missing or malformed webhook secret fails loudly at start-up: a
simulator that signs with a broken key would only show up later as confusing 401s elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhooks.signing import decode_secret

DEFAULT_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)


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
    secret = _lookup("SIMULATOR_WEBHOOK_SECRET", config, environ)
    if not secret:
        raise SettingsError(
            "SIMULATOR_WEBHOOK_SECRET is required (a whsec_<base64> secret shared with the "
            "webhook receiver; make one with webhooks.signing.generate_secret())"
        )
    try:
        decode_secret(secret)
    except ValueError as exc:
        raise SettingsError(f"SIMULATOR_WEBHOOK_SECRET is malformed: {exc}") from None

    def num(key: str, default: float) -> float:
        return _number(key, _lookup(key, config, environ), default)

    amqp_url = str(_lookup("SIMULATOR_AMQP_URL", config, environ) or "")
    if amqp_url and not amqp_url.startswith(("amqp://", "amqps://")):
        raise SettingsError("SIMULATOR_AMQP_URL must be an amqp:// or amqps:// URL")
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
    )
