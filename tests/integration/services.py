"""Where the real services are, and how tests get a clean corner of each.

Locally a service that is down skips the tests that need it; under CI (``CI`` set) it fails them,
so a green CI run always means the services were really exercised.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

POSTGRES_ADMIN_URL = os.environ.get("LIAISON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("LIAISON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
RABBITMQ_URL = os.environ.get("LIAISON_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
BROKERS = {"redis": REDIS_URL, "rabbitmq": RABBITMQ_URL}


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    default_port = {"postgresql": 5432, "redis": 6379, "amqp": 5672}[parts.scheme.split("+")[0]]
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def require(url: str, what: str) -> None:
    if reachable(url):
        return
    message = f"{what} is not reachable at {urlsplit(url).netloc}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI must start it: see .ci/run)")
    pytest.skip(message)


def create_postgres_database() -> tuple[str, str]:
    """A fresh database for this test session; returns (SQLAlchemy URL, name)."""
    require(POSTGRES_ADMIN_URL, "PostgreSQL")
    name = f"liaison_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}", name


def drop_postgres_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- Databases at the migrations' head, copied instead of migrated --------------------------------
# Running every migration for each test's fresh database costs 1.5-2.5 s of CPU (alembic loads and
# runs ~20 scripts); a suite builds well over a hundred. A database at head is built once (per
# migration set, per machine for PostgreSQL, per test process for SQLite) and copied: PostgreSQL's
# CREATE DATABASE ... TEMPLATE, a file copy for SQLite. The migrations themselves stay tested by
# the tests that upgrade and downgrade step by step (test_migration_*.py) and by every template built.

_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
_sqlite_template: Path | None = None


def migrations_fingerprint() -> str:
    """Names the migration set, so a template built from other migrations is never used."""
    digest = hashlib.sha256()
    for path in sorted(_MIGRATIONS.rglob("*.py")):
        digest.update(path.relative_to(_MIGRATIONS).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _upgrade(database_url: str) -> None:
    from alembic import command

    from app.cli import alembic_config

    command.upgrade(alembic_config(database_url), "head")


def _postgres_template() -> str:
    """The migrated template's name, built on first use: migrated under a private name and renamed,
    so a crash mid-build or a second test process building at once never leaves a half-built one."""
    name = f"liaison_template_{migrations_fingerprint()}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return name
        building = f"liaison_building_{uuid.uuid4().hex[:10]}"
        conn.execute(f'CREATE DATABASE "{building}"')
        try:
            base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
            _upgrade(f"{base}/{building}")
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        except psycopg.errors.DuplicateDatabase:
            pass  # another test process finished first: theirs is the same migrations' head
        finally:
            conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
    return name


def copy_migrated_sqlite(path: Path) -> None:
    """Writes an empty database at the migrations' head to ``path`` (which must not hold one yet)."""
    global _sqlite_template
    if _sqlite_template is None:
        built = Path(tempfile.mkdtemp(prefix="liaison-template-")) / f"{migrations_fingerprint()}.db"
        _upgrade(f"sqlite:///{built}")
        _sqlite_template = built
    shutil.copyfile(_sqlite_template, path)


def clone_migrated(database_url: str) -> bool:
    """Puts a migrated copy in place of one of the tests' own fresh, empty databases (a SQLite file
    not yet written, or a ``liaison_test_*`` PostgreSQL database with no table); False for any
    other database, which the caller migrates itself."""
    parts = urlsplit(database_url)
    if parts.scheme == "sqlite" and not parts.query:
        path = Path(parts.path[1:]) if parts.path.startswith("//") else Path(parts.path.removeprefix("/"))
        if path.name and (not path.exists() or path.stat().st_size == 0):
            copy_migrated_sqlite(path)
            return True
        return False
    admin = urlsplit(POSTGRES_ADMIN_URL)
    name = parts.path.removeprefix("/")
    if not (
        parts.scheme.startswith("postgresql") and parts.netloc == admin.netloc and name.startswith("liaison_test_")
    ):
        return False
    with psycopg.connect(POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = 'public' LIMIT 1").fetchone():
            return False
    template = _postgres_template()
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return True
