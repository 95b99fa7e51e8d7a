"""Is the database schema where this release expects it? (for ``/readyz``, the API's error handler
and the CLI)

A process whose code expects tables or columns that are not there yet must not take traffic: the
release step (``flask --app app liaison db upgrade``) has not run, or failed. A statement that fails
on a missing table or column is checked against ``alembic_version`` (:func:`pending_migrations`):
when migrations are pending the web answers 503 and the CLI one line, each naming the command that
fixes it (:data:`UPGRADE_HINT`), not a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from app.package_files import shipped

#: The fix for pending migrations, as the web's 503 and the CLI's one line name it.
UPGRADE_HINT = "run `liaison db upgrade` (or `flask --app app liaison db upgrade`)"
#: PostgreSQL's SQLSTATEs for a table or a column the statement names but the schema lacks.
_UNDEFINED_TABLE_OR_COLUMN = frozenset({"42P01", "42703"})
#: SQLite's messages for the same.
_SQLITE_MISSING = ("no such table", "no such column", "has no column named")


def alembic_config(database_url: str, database_pooler: str | None = None) -> Config:
    """Alembic's configuration for this release's migrations (a checkout's ``migrations/``, or the
    installed package's: app/package_files.py), aimed at ``database_url``. No alembic.ini: its
    logging is the command line's (``skip_logging``), and the script location is set here."""
    config = Config()
    config.set_main_option("script_location", str(shipped("migrations")))
    config.set_main_option("path_separator", "os")
    config.attributes["database_url"] = database_url
    if database_pooler:  # else migrations/env.py reads LIAISON_DATABASE_POOLER
        config.attributes["database_pooler"] = database_pooler
    config.attributes["skip_logging"] = True
    return config


@dataclass(frozen=True)
class MigrationStatus:
    current: tuple[str, ...]  # revisions recorded in the database (empty: never migrated)
    heads: tuple[str, ...]  # head revisions of this release's migrations/
    unknown: tuple[str, ...]  # in the database but not in migrations/: a newer release migrated it

    @property
    def pending(self) -> bool:
        """True when migrations of this release are not applied. A database *ahead* of the code
        (during a rolling deploy, after the new release migrated) is not pending: migrations are
        written expand-then-contract, so the old code keeps working on the new schema."""
        return not self.unknown and set(self.current) != set(self.heads)

    def describe(self) -> str:
        current = ", ".join(self.current) or "none"
        return f"database migrations pending (database at {current}, code at {', '.join(self.heads)})"


@lru_cache(maxsize=1)
def _script_revisions() -> tuple[tuple[str, ...], frozenset[str]]:
    """Heads and all revision ids of migrations/: fixed for the life of the process."""
    script = ScriptDirectory.from_config(alembic_config(""))
    return tuple(sorted(script.get_heads())), frozenset(rev.revision for rev in script.walk_revisions())


def migration_status(conn: Connection) -> MigrationStatus:
    """Compare the database's ``alembic_version`` with the script directory's heads."""
    heads, known = _script_revisions()
    current = tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
    return MigrationStatus(current=current, heads=heads, unknown=tuple(r for r in current if r not in known))


def missing_schema(exc: BaseException) -> bool:
    """True when a statement failed because a table or a column it names does not exist: the sign
    of a schema behind the code (or of a bug; :func:`pending_migrations` tells the two apart)."""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in _UNDEFINED_TABLE_OR_COLUMN:
        return True
    return any(text in str(orig) for text in _SQLITE_MISSING)


def pending_migrations(engine: Engine) -> MigrationStatus | None:
    """The migration status when this release's migrations are not applied; None otherwise (after a
    :func:`missing_schema` error: a schema that is current means a bug, which stays one). Asks the
    database on a connection of its own; one that does not answer is None too."""
    try:
        with engine.connect() as conn:
            status = migration_status(conn)
    except SQLAlchemyError:
        return None
    return status if status.pending else None


def pending_message(status: MigrationStatus) -> str:
    """One line: where the database and the code are, and the command that fixes it."""
    return f"{status.describe()}: {UPGRADE_HINT}"
