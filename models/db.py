"""Engine and sessions, fork-safe.

SQLite has no row locks, so every SQLite transaction starts with ``BEGIN IMMEDIATE``: writers are
serialised, which is what ``SELECT … FOR UPDATE`` gives us on PostgreSQL. The Celery prefork pool
calls :meth:`Database.after_fork` so children never share the parent's pooled connections.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

#: The embedded SQLite file holds API key hashes, callback secrets and every task's input: only its
#: owner may read it. SQLite gives its -wal and -shm files the database file's mode.
SQLITE_FILE_MODE = 0o600


def ensure_private_sqlite_file(url: str) -> Path | None:
    """Create a SQLite database file (and its folder) owner-only, before SQLAlchemy or Alembic opens
    it: SQLite itself would create it with the process umask (usually world-readable). A file that
    exists already is tightened to 0600 too. Returns the file, or None for other databases and
    in-memory SQLite."""
    parsed = make_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or not parsed.database
        or parsed.database == ":memory:"
        or parsed.database.startswith("file:")
    ):
        return None
    path = Path(parsed.database)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Never open (and close) a database file that exists: closing any descriptor of a file drops
    # every POSIX lock this process holds on it, which SQLite's own connections rely on.
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDONLY, SQLITE_FILE_MODE))
    except FileExistsError:
        if path.stat().st_uid != os.getuid():
            return path  # someone else's file is theirs to keep private
    os.chmod(path, SQLITE_FILE_MODE)  # by path: exactly 0600 whatever the umask, no descriptor opened
    return path


class Database:
    def __init__(self, url: str, echo: bool = False) -> None:
        self.url = url
        self.engine: Engine = _make_engine(url, echo)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One unit of work: commit on success, roll back on any error."""
        with self.sessionmaker() as session, session.begin():
            yield session

    def after_fork(self) -> None:
        # close=False: the parent still owns those sockets; the child just forgets them.
        self.engine.dispose(close=False)

    def dispose(self) -> None:
        self.engine.dispose()


def _make_engine(url: str, echo: bool) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, echo=echo, pool_pre_ping=True)
    ensure_private_sqlite_file(url)
    engine = create_engine(url, echo=echo, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
