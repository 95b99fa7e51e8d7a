"""Alembic environment: URL from foundation.settings (or the caller's config), batch mode for SQLite."""

import sys
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine

from foundation.database_urls import normalise_database_url
from foundation.options import ConfigError
from foundation.settings import database_pooler_from_env, database_url_from_env
from models import Base
from models.db import ensure_private_sqlite_file, postgres_connect_args

config = context.config
if config.config_file_name is not None and not config.attributes.get("skip_logging"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# Only the database URL: a migration must run even while a provider's secrets are still missing.
# A platform's postgres:// is mapped to Liaison's driver; a bad URL is one line naming the setting.
try:
    url = normalise_database_url("DATABASE_URL", config.attributes.get("database_url") or database_url_from_env())
    # Behind PgBouncer in transaction pooling a migration prepares no statement either (models.db).
    pooler = config.attributes.get("database_pooler") or database_pooler_from_env()
except ConfigError as exc:
    print(f"liaison: configuration error: {exc}", file=sys.stderr)
    raise SystemExit(78) from None  # EX_CONFIG, as app/startup.py
if url.startswith("sqlite"):
    ensure_private_sqlite_file(url)  # 0600, before create_engine below can create it world-readable


def run_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, render_as_batch=True, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connect_args = {} if url.startswith("sqlite") else postgres_connect_args(pooler)
    # hide_parameters: an error names its statement, not its values
    engine = create_engine(url, hide_parameters=True, connect_args=connect_args)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
