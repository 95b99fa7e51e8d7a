"""The Flask application factory. No I/O here: engines connect lazily, the broker on first publish."""

from __future__ import annotations

from flask import Flask

from app import cli, errors, observability, session
from app.api import admin, admin_clients, health, inbound, tasks
from app.celery_app import celery_init_app
from foundation.settings import Settings
from models import publishing
from models.db import Database
from workers.limiter import build_limiter
from workers.outbox import Publisher
from workers.providers import build_providers
from workers.runtime import Liaison


def create_app(settings: Settings | None = None, celery_config: dict | None = None) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask("liaison")
    app.config.update(MAX_CONTENT_LENGTH=settings.max_body_bytes, CELERY=celery_config or {})
    observability.configure_logging(settings.log_format, settings.log_level)

    db = Database(settings.database_url)
    celery = celery_init_app(app, settings)
    limiter = build_limiter(settings.rate_limit_storage, db, redis_url=settings.rate_limit_redis_url,
                            namespace=settings.queue)
    publisher = Publisher(celery, db)
    # The one publish path: after every commit (looked up per call, so a benchmark can stub it).
    publishing.install(db.sessionmaker, lambda rows: publisher.publish(rows))
    app.extensions["liaison"] = Liaison(
        settings=settings, db=db, providers=build_providers(settings, limiter), publisher=publisher,
        limiter=limiter,
    )

    errors.init_app(app)
    session.init_app(app)
    app.register_blueprint(tasks.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(inbound.bp)
    app.register_blueprint(admin.bp)
    app.register_blueprint(admin_clients.bp)
    app.cli.add_command(cli.group)
    observability.init_app(app)
    return app
