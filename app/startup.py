"""Start-up failures as one line, not a traceback: for the web, worker, beat and CLI processes.

A process that cannot start says why in one line -- the setting at fault (a broker URL whose
transport kombu does not know among them), or the host it could not reach or that refused its login
(never a password) -- and exits non-zero: 78 for a configuration error, 69 for a database or
broker it cannot reach (sysexits' EX_CONFIG and EX_UNAVAILABLE: a supervisor should not restart the
first in a loop). Each entry point calls here once: app/gunicorn_config.py (the web master),
app/make_celery.py (worker and beat), ``create_app`` and the ``liaison`` CLI group (app/cli).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import NoReturn
from urllib.parse import urlsplit

import click
import kombu
import kombu.exceptions
from flask.cli import FlaskGroup, ScriptInfo
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from core.queue_types import is_sentinel_url
from foundation.options import mask_url_password
from foundation.settings import ConfigError, Settings
from models.db import ensure_private_sqlite_file

EXIT_CONFIG = 78
EXIT_UNAVAILABLE = 69
#: ``password=secret`` in a libpq-style DSN echoed by a driver.
_DSN_PASSWORD = re.compile(r"(password\s*=\s*)\S+", re.IGNORECASE)
#: What a broker that cannot be reached raises (kombu wraps the socket errors of its transports).
BROKER_ERRORS = (kombu.exceptions.OperationalError, ConnectionError, OSError)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"liaison: {message}", err=True)
    raise SystemExit(code)


def config_failure(exc: ConfigError) -> NoReturn:
    fail(f"configuration error: {exc}", EXIT_CONFIG)


def broker_transport_error(url: str) -> ConfigError | None:
    """A broker URL whose scheme kombu has no transport for (``reddis://``), or one whose library is
    not installed: the settings module cannot tell (it imports no broker library), kombu says it
    only at the first connection, as a ``KeyError`` traceback. Each URL of a ``;`` failover list."""
    for part in (p.strip() for p in url.split(";")):
        try:
            kombu.Connection(part).get_transport_cls()
        except KeyError as exc:
            scheme = part.split("://", 1)[0]
            hint = str(exc.args[0]) if exc.args else ""
            return ConfigError(
                f"CELERY_BROKER_URL names the transport {scheme!r}, which does not exist ({hint.strip()}): "
                "use redis://, rediss://, amqp://, amqps:// or filesystem://"
            )
        except ImportError as exc:
            return ConfigError(f"CELERY_BROKER_URL needs a library that is not installed: {exc}")
    return None


def settings_from_env() -> Settings:
    """The environment's settings, and a broker URL kombu can use; else a :class:`ConfigError`."""
    settings = Settings.from_env()
    error = broker_transport_error(settings.broker_url)
    if error is not None:
        raise error
    return settings


def load_settings() -> Settings:
    """The environment's settings, or one line naming the bad variable and exit 78."""
    try:
        return settings_from_env()
    except ConfigError as exc:
        config_failure(exc)


def running_flask_cli() -> bool:
    """True while the ``flask`` command, or the ``liaison`` one (app/cli/main.py, which hands the
    group a ScriptInfo as ``flask`` does), loads the app to run a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    root = ctx.find_root()
    return isinstance(root.command, FlaskGroup) or isinstance(root.obj, ScriptInfo)


def where(url: str) -> str:
    """``host:port`` of a database or broker URL, or a SQLite file's path: never a user or password.
    A list of URLs (kombu's failover list, Redis Sentinels: ``;``-separated) gives each one's."""
    if ";" in url:
        return ", ".join(where(part.strip()) for part in url.split(";") if part.strip())
    if url.startswith("sqlite"):
        return make_url(url).database or ":memory:"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "localhost"
    return f"{host}:{port}" if port else host


def reason(exc: BaseException) -> str:
    """The first line of the driver's own message, passwords masked, at most 200 characters."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    text = lines[0] if lines else type(cause).__name__
    return _DSN_PASSWORD.sub(r"\1***", mask_url_password(text))[:200]


def database_failure(url: str, exc: BaseException) -> str:
    return f"cannot use the database at {where(url)} (DATABASE_URL): {reason(exc)}"


#: What brokers answer to a wrong user name or password (RabbitMQ; Redis 6+; Redis with requirepass).
_LOGIN_REFUSED = ("ACCESS_REFUSED", "WRONGPASS", "invalid username-password", "NOAUTH", "Authentication required")


def broker_failure(url: str, exc: BaseException) -> str:
    text = reason(exc)
    if any(marker in text for marker in _LOGIN_REFUSED):
        return (
            f"the broker at {where(url)} refused the login (CELERY_BROKER_URL): check the user name and "
            f"password in CELERY_BROKER_URL (percent-encoded): {text}"
        )
    return f"cannot reach the broker at {where(url)} (CELERY_BROKER_URL): {text}"


def broker_errors(url: str) -> tuple[type[BaseException], ...]:
    """What using the broker at ``url`` raises when it cannot be reached or refuses the login: kombu's
    own errors, and its transport's that kombu passes through unwrapped (py-amqp's
    ``AccessRefused`` for a wrong password is a channel error, not a connection one)."""
    connection = kombu.Connection(url.split(";")[0])
    return (*BROKER_ERRORS, *connection.connection_errors, *connection.channel_errors)


def _until(deadline: float, attempt: Callable[[], None], errors: tuple[type[BaseException], ...]) -> None:
    """Call ``attempt`` until it succeeds or ``deadline`` (monotonic) has passed; then raise its error."""
    while True:
        try:
            attempt()
            return
        except errors:
            if time.monotonic() >= deadline:
                raise
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def check_database(url: str, wait_s: float) -> None:
    """Connect once (retrying for up to ``wait_s``), or exit 69 with one line naming the host."""
    try:
        ensure_private_sqlite_file(url)
        connect_args = {"connect_timeout": 5} if make_url(url).get_backend_name() == "postgresql" else {}
        engine = create_engine(url, poolclass=NullPool, connect_args=connect_args, hide_parameters=True)
    except (SQLAlchemyError, OSError, ValueError) as exc:
        fail(database_failure(url, exc), EXIT_UNAVAILABLE)
    try:
        _until(time.monotonic() + wait_s, lambda: engine.connect().close(), (SQLAlchemyError,))
    except SQLAlchemyError as exc:
        fail(database_failure(url, exc), EXIT_UNAVAILABLE)
    finally:
        engine.dispose()


def check_broker(url: str, wait_s: float, sentinel_master: str = "") -> None:
    """Connect once (retrying for up to ``wait_s``), or exit 69 with one line naming the host. The
    embedded filesystem:// broker is a folder that ``celery_init_app`` has created: nothing to reach.
    Through Redis Sentinel (``sentinel://``), connecting asks a Sentinel for ``sentinel_master``'s
    address and reaches that Redis: both must answer."""
    if url.startswith("filesystem://"):
        return
    errors = broker_errors(url)
    options = {"master_name": sentinel_master} if is_sentinel_url(url) else {}
    with kombu.Connection(url, connect_timeout=5, transport_options=options) as connection:
        try:
            _until(
                time.monotonic() + wait_s,
                lambda: connection.ensure_connection(max_retries=1, interval_start=0),
                errors,
            )
        except errors as exc:
            fail(broker_failure(url, exc), EXIT_UNAVAILABLE)


def check_services(settings: Settings) -> None:
    """The database and the broker answer, or the process ends here with one line."""
    check_database(settings.database_url, settings.startup_wait_s)
    check_broker(settings.broker_url, settings.startup_wait_s, settings.redis_sentinel_master)
