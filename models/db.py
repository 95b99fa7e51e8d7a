"""Engine and sessions, fork-safe.

SQLite has no row locks, so every SQLite transaction starts with ``BEGIN IMMEDIATE``: writers are
serialised, which is what ``SELECT … FOR UPDATE`` gives us on PostgreSQL. The Celery prefork pool
calls :meth:`Database.after_fork` so children never share the parent's pooled connections.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


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
    engine = create_engine(
        url, echo=echo, connect_args={"check_same_thread": False, "timeout": 30}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
