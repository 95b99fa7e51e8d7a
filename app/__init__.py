"""The top of the house: the Flask application factory (:func:`create_app`), with the Celery app
(``celery_app``, ``make_celery`` for ``celery -A``), the CLI (``cli``), the HTTP API (``api``), the
console (``console``), the broker consumers (``consumers``) and the observability wiring.

Processes start here (gunicorn ``app:create_app()``, ``flask --app app``, ``celery -A
app.make_celery``); no other package imports ``app``. No network I/O at import: engines connect
lazily, the broker on first publish. A bad setting, or a SQLite file that cannot be made, ends the
process with one line (app/startup.py)."""

from __future__ import annotations

import os

from flask import Flask

from app import cli, console, errors, observability, session, startup
from app.api import admin, admin_clients, health, inbound, reference, tasks
from app.celery_app import celery_init_app
from app.observability import tracing
from foundation.settings import ConfigError, Settings, database_pooler_from_env, database_url_from_env
from models import publishing
from models.db import Database
from runtime.context import Liaison
from runtime.limiter import build_limiter
from runtime.outbox import Publisher
from service import dispatch
from workers.call_slots import CallSlots
from workers.channels import ChannelPublisher
from workers.providers import build_providers

#: What ``liaison db upgrade`` reads when another setting is wrong: where the database is, and how.
DATABASE_ONLY = ("DATABASE_URL", "LIAISON_VAR_DIR", "LIAISON_DATABASE_POOLER")


def _settings_from_env() -> tuple[Settings, str | None]:
    """The environment's settings. A bad one ends the process with one line (app.startup), except
    under the ``flask`` command: there the app is built on ``DATABASE_URL`` alone and the error kept,
    so ``liaison db upgrade`` still runs and every other command reports it (app/cli)."""
    try:
        return startup.settings_from_env(), None
    except ConfigError as exc:
        if not startup.running_flask_cli():
            startup.config_failure(exc)
        try:
            database_url_from_env()  # a bad DATABASE_URL (or pooler) stops even `db upgrade`
            database_pooler_from_env()
        except ConfigError as bad_url:
            startup.config_failure(bad_url)
        database_only = {name: os.environ[name] for name in DATABASE_ONLY if name in os.environ}
        return Settings.from_env(database_only), str(exc)


def create_app(settings: Settings | None = None, celery_config: dict | None = None) -> Flask:
    config_error = None
    if settings is None:
        settings, config_error = _settings_from_env()
    app = Flask("liaison")
    app.extensions["liaison_config_error"] = config_error
    app.config.update(MAX_CONTENT_LENGTH=settings.max_body_bytes, CELERY=celery_config or {})
    observability.configure_logging(settings.log_format, settings.log_level)

    try:
        # SQLite: creates its file (0600) now (LIAISON_VAR_DIR's too)
        db = Database(settings.database_url, pooler=settings.database_pooler)
    except OSError as exc:
        startup.fail(startup.database_failure(settings.database_url, exc), startup.EXIT_UNAVAILABLE)
    celery = celery_init_app(app, settings)
    limiter = build_limiter(
        settings.rate_limit_storage, db, redis_url=settings.rate_limit_redis_url, namespace=settings.queue
    )
    publisher = Publisher(celery, db)
    # The one publish path: after every commit (looked up per call, so a benchmark can stub it).
    publishing.install(db.sessionmaker, lambda rows: publisher.publish(rows), settings.start_leases)
    dispatch.install(db.sessionmaker, settings.dispatch)  # fair dispatch: what goes to the broker when
    app.extensions["liaison"] = Liaison(
        settings=settings,
        db=db,
        providers=build_providers(settings, limiter),
        publisher=publisher,
        limiter=limiter,
        channels=ChannelPublisher(settings),  # connects on first use
        call_slots=CallSlots(),
    )

    errors.init_app(app)
    session.init_app(app)
    app.register_blueprint(tasks.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(reference.bp)
    app.register_blueprint(reference.assets)
    app.register_blueprint(inbound.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(admin_clients.bp)
    app.register_blueprint(console.bp)
    app.cli.add_command(cli.group)
    observability.init_app(app)
    tracing.register(app, db.engine, settings)  # only with OTEL_EXPORTER_OTLP_ENDPOINT set
    return app
