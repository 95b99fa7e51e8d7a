"""Engine and sessions, fork-safe.

SQLite has no row locks, so every SQLite transaction starts with ``BEGIN IMMEDIATE``: writers are
serialised, which is what ``SELECT … FOR UPDATE`` gives us on PostgreSQL. The Celery prefork pool
calls :meth:`Database.after_fork` so children never share the parent's pooled connections.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

import psycopg
from psycopg.pq import ExecStatus
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from models.store import SQLITE, STORE, Store, for_engine

#: The embedded SQLite file holds API key hashes, callback secrets and every task's input: only its
#: owner may read it. SQLite gives its -wal and -shm files the database file's mode.
SQLITE_FILE_MODE = 0o600


def ensure_private_sqlite_file(url: str) -> Path | None:
    """Create a SQLite database file (and its folder) owner-only, before SQLAlchemy or Alembic opens
    it: SQLite itself would create it with the process umask (usually world-readable). A file that
    exists already is tightened to 0600 too. Returns the file, or None for other databases and
    in-memory SQLite. (The folder made here is the default's, ``LIAISON_VAR_DIR``: the settings
    refuse a ``DATABASE_URL`` whose folder does not exist, foundation/database_urls.py.)"""
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


#: ``LIAISON_DATABASE_POOLER``'s values: nothing between Liaison and PostgreSQL, or PgBouncer in
#: ``pool_mode=transaction``.
NO_POOLER = "none"
PGBOUNCER_TRANSACTION = "pgbouncer-transaction"
POOLERS = (NO_POOLER, PGBOUNCER_TRANSACTION)


def postgres_connect_args(pooler: str) -> dict[str, Any]:
    """psycopg's options for a PostgreSQL connection behind ``pooler``.

    psycopg prepares a statement on the server once a connection has run it ``prepare_threshold``
    (5) times, as ``_pg3_<n>``, and from then on only names it. Behind PgBouncer in transaction
    pooling each transaction may run on another server connection: the name is unknown there
    (``prepared statement "_pg3_0" does not exist``), or another client's statement already holds it
    on the server connection it got (``... already exists``), since PgBouncer resets nothing between
    transactions. Debian's PgBouncer (1.18) does not track protocol-level prepared statements
    (``max_prepared_statements`` came with 1.21), so psycopg prepares none: ``prepare_threshold=None``.
    Everything else Liaison holds on a connection is transaction-scoped already (advisory locks
    ``pg_advisory_xact_lock``, ``SET LOCAL``, no LISTEN, no temporary table; docs/architecture.md)."""
    if pooler not in POOLERS:
        raise ValueError(f"unknown database pooler {pooler!r}; one of {', '.join(POOLERS)}")
    return {"prepare_threshold": None} if pooler == PGBOUNCER_TRANSACTION else {}


#: Results that have columns (psycopg's own test, ``BaseCursor.description``).
_WITH_TUPLES = (ExecStatus.TUPLES_OK, ExecStatus.SINGLE_TUPLE, ExecStatus.TUPLES_CHUNK)


class Description(Sequence[psycopg.Column]):
    """A result's ``cursor.description``, its ``Column`` objects made when first read.

    psycopg makes the whole list at every read of ``description``: for each column a ``Column``
    that decodes its name and looks its type up, five Python calls, and SQLAlchemy reads it once per
    statement. But SQLAlchemy uses it only to build a statement's result metadata the first time it
    runs; from then on the compiled statement's cached metadata is used, and ``description`` is only
    told apart from None. A happy-path job's 20 statements return about 330 columns (the wide task
    row several times): 1,650 of psycopg's 3,056 calls per job went to lists nobody read
    (tests/integration/test_statement_budget.py). The columns are made from the result that was
    current when ``description`` was read; that result must still be the cursor's then (SQLAlchemy
    reads them before it fetches a row or runs anything else), else this refuses rather than
    describe another."""

    __slots__ = ("_columns", "_cursor", "_length", "_result")

    def __init__(self, cursor: DescribedOnDemandCursor, result: Any, length: int) -> None:
        self._cursor = cursor
        self._result = result
        self._length = length
        self._columns: list[psycopg.Column] | None = None

    def _made(self) -> list[psycopg.Column]:
        if self._columns is None:
            if self._cursor.pgresult is not self._result:
                raise RuntimeError("cursor.description read after the cursor moved to another result")
            self._columns = [psycopg.Column(self._cursor, i) for i in range(self._length)]
        return self._columns

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> psycopg.Column: ...
    @overload
    def __getitem__(self, index: slice) -> list[psycopg.Column]: ...
    def __getitem__(self, index: int | slice) -> psycopg.Column | list[psycopg.Column]:
        return self._made()[index]

    def __iter__(self) -> Iterator[psycopg.Column]:
        return iter(self._made())

    def __repr__(self) -> str:
        return repr(self._made())


class DescribedOnDemandCursor(psycopg.Cursor[Any]):
    """psycopg's client cursor with a :class:`Description` (``connect_args``' ``cursor_factory``,
    the option SQLAlchemy's psycopg dialect documents for ``ClientCursor``): everything else as is,
    prepared statements included."""

    @property
    def description(self) -> Description | None:  # type: ignore[override]
        result = self.pgresult
        if result and (result.nfields or result.status in _WITH_TUPLES):
            return Description(self, result, result.nfields)
        return None


class Database:
    def __init__(self, url: str, echo: bool = False, pooler: str = NO_POOLER) -> None:
        self.url = url
        self.engine: Engine = _make_engine(url, echo, pooler)
        #: the database's verbs, chosen once from its dialect; every session carries it (``store_of``)
        self.store: Store = for_engine(self.engine)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False, info={STORE: self.store})

    @property
    def is_sqlite(self) -> bool:
        return self.store is SQLITE

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


def database_unavailable(exc: BaseException) -> bool:
    """The one place a database error is told apart: True when the database could not be reached or
    answer *for now*, so the work is tried again a moment later (a task) or the request answered 503
    (the web); False for anything else (a bug, a constraint): it propagates.

    Unavailable: the connection died under the statement (a restart, a failover: the pool is
    invalidated with it), the server refused or dropped it (``OperationalError``), or the pool had
    no connection free within ``pool_timeout`` (``sqlalchemy.exc.TimeoutError``: every one of the
    ``POOL_SIZE`` was held by other threads). The last is no ``DBAPIError`` -- the driver was never
    reached -- but it is just as passing, and nothing was done.
    """
    if isinstance(exc, PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and (exc.connection_invalidated or isinstance(exc, OperationalError))


#: How long a SQLite connection waits for another process's write lock.
SQLITE_BUSY_S = 30

#: A pooled connection idle longer than this is pinged before it is used; one used more recently is
#: trusted. (``pool_pre_ping`` pings before every transaction: on a busy worker, a round trip for
#: each of a job's dozen transactions, to connections that answered milliseconds ago.) A connection
#: that dies while in use -- the server restarted -- fails its statement, which invalidates every
#: connection of the pool; tasks retry such a failure at once (``workers.tasks.attempt``), the web
#: answers 503 (``app.errors``).
PING_AFTER_IDLE_S = 5.0


#: PostgreSQL connections one process keeps and holds at once. SQLAlchemy's default pool keeps 5 and
#: opens up to 10 more under load, closing each of those when it is handed back: a threaded worker
#: (the Procfile's calls and relay lines) whose threads overlap in the database more than 5 at a
#: time opened and closed a connection every few jobs, and each is a new PostgreSQL backend (a fork,
#: its caches filled again, every statement parsed again before psycopg prepares it): in
#: bench/e2e.py, 0.1-0.2 connections per job and 1.1-2.4 ms of PostgreSQL CPU per job. The same 15
#: at most, kept once opened, cost none of that. The pool opens them on demand, so a process whose
#: threads never overlap (a prefork child, the web's four threads) holds no more than it did; a
#: thread beyond the 15 waits for one (``pool_timeout``), as it did past 5 + 10.
POOL_SIZE = 15


def _make_engine(url: str, echo: bool, pooler: str) -> Engine:
    """``hide_parameters``: a database error (and ``echo``) names its statement, never the values
    bound to it -- a task's input, a callback URL and its token -- since such an error may be
    logged or shown whole. Behind PgBouncer the pool stays as it is: its connections are
    PgBouncer's client connections, cheap to keep, each holding a server connection only for the
    length of a transaction (docs/runbook.md sizes PgBouncer's side)."""
    if not url.startswith("sqlite"):
        engine = create_engine(
            url,
            echo=echo,
            pool_size=POOL_SIZE,
            max_overflow=0,
            hide_parameters=True,
            connect_args={**postgres_connect_args(pooler), "cursor_factory": DescribedOnDemandCursor},
        )
        _ping_idle_connections(engine)
        return engine
    ensure_private_sqlite_file(url)
    engine = create_engine(
        url,
        echo=echo,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_S},
        hide_parameters=True,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_S * 1000}")
        _use_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _use_wal(cursor: sqlite3.Cursor) -> None:
    """WAL is a property of the file, kept once set, so it is set only when missing. Switching
    takes a lock without waiting on the busy timeout: two processes opening a fresh file at once
    (a worker's first call beside another's write) got "database is locked" at once, so the switch
    is tried again for as long as the busy timeout would have waited."""
    deadline = time.monotonic() + SQLITE_BUSY_S
    while str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _ping_idle_connections(engine: Engine) -> None:
    """SQLAlchemy's "pessimistic disconnect handling" recipe, for idle connections only: raising
    ``DisconnectionError`` at checkout makes the pool discard the connection and take another."""
    dialect = engine.dialect

    @event.listens_for(engine.pool, "checkin")
    def _idle_from_now(_dbapi_conn: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def _ping_if_idle(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return  # new, or used a moment ago
        try:
            dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_conn, None):
                raise DisconnectionError("idle connection found closed") from exc
            raise


_IDLE_SINCE = "liaison_idle_since"
