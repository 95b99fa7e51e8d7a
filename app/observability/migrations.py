"""Is the database schema where this release expects it? (for ``/readyz``)

A process whose code expects tables or columns that are not there yet must not take traffic: the
release step (``flask --app app liaison db upgrade``) has not run, or failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from app.package_files import shipped


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
