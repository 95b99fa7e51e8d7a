"""The store: the statements Liaison sends, per database, behind domain verbs.

One module per table family, each with a PostgreSQL and a SQLite class: ``outbox`` (an outbox
row's life, ``core/outbox_states.py``: its moves, a new row, and the statements that add, claim
and finish rows with their task's timeline), ``inbox`` (a message seen once, and a vendor job's
task found with it), ``locks`` (what serialises writers), ``rate_limits`` (a key's GCRA
slot, on the database's clock), ``reads`` (the operators' views' and
the gauges' reads each database answers its own way), ``slots`` (slots and leases: a relay's
slots, and its start counted with them), ``timeline`` (a task's timeline entries: the one verb
that writes one), ``dispatch`` (fair dispatch's counts, choices and release: one class, the same
statements on both), ``publication`` (what a publication writes on a row, and what a session notes
to publish: the publish hook, ``models.publishing``, stands on it) and ``postgres_rows``
(PostgreSQL's one-statement writes of several rows, which with ``slots`` reaches into the ORM's
bookkeeping to mark what they wrote). A :class:`Store` holds one of each, chosen once from the
engine's dialect when the database is built (``models.db.Database``), as DBOS's
``SystemDatabase.create()`` picks its class from the URL; callers ask :func:`store_of` for their
session's and call its verbs, and never ask which database it is (``tests/unit/
test_store_boundary.py`` counts the places that still do, outside this package, and holds the
count down).

The other families (the tasks' own statements, the submit's admission, notices, endpoint health
rows) still write from their modules; docs/architecture.md "The store" says
what is where.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from models.store.claims import Claims, PostgresClaims, SqliteClaims
from models.store.dispatch import FairDispatch
from models.store.inbox import Inbox, PostgresInbox, SqliteInbox
from models.store.locks import Locks, PostgresLocks, SqliteLocks
from models.store.outbox import OutboxRows, PostgresOutboxRows, SqliteOutboxRows
from models.store.rate_limits import PostgresRateLimits, RateLimits, SqliteRateLimits
from models.store.reads import PostgresReads, Reads, SqliteReads
from models.store.slots import PostgresSlots, Slots, SqliteSlots
from models.store.timeline import PostgresTimeline, SqliteTimeline, Timeline

#: the key of a session's store in its ``info`` (set by the sessionmaker of ``models.db.Database``)
STORE = "liaison.store"


@dataclass(frozen=True)
class Store:
    """One database's verbs, family by family."""

    name: str
    outbox: OutboxRows
    inbox: Inbox
    locks: Locks
    reads: Reads
    slots: Slots
    timeline: Timeline
    dispatch: FairDispatch
    rate_limits: RateLimits
    claims: Claims


POSTGRESQL = Store(
    "postgresql",
    PostgresOutboxRows(),
    PostgresInbox(),
    PostgresLocks(),
    PostgresReads(),
    PostgresSlots(),
    PostgresTimeline(),
    FairDispatch(),
    PostgresRateLimits(),
    PostgresClaims(),
)
SQLITE = Store(
    "sqlite",
    SqliteOutboxRows(),
    SqliteInbox(),
    SqliteLocks(),
    SqliteReads(),
    SqliteSlots(),
    SqliteTimeline(),
    FairDispatch(),  # the same statements on both databases
    SqliteRateLimits(),
    SqliteClaims(),
)
_BY_DIALECT = {store.name: store for store in (POSTGRESQL, SQLITE)}


def for_dialect(name: str) -> Store:
    """The store of an engine whose dialect is ``name`` (``postgresql`` or ``sqlite``)."""
    try:
        return _BY_DIALECT[name]
    except KeyError:
        raise ValueError(f"no store for the {name!r} database; one of {', '.join(_BY_DIALECT)}") from None


def for_engine(engine: Engine) -> Store:
    """The store of ``engine``: chosen once, when the database is built (``models.db.Database``)."""
    return for_dialect(engine.dialect.name)


def store_of_connection(conn: Connection) -> Store:
    """The store of a Core connection (the gauges' scrape reads through one, not a session)."""
    return for_dialect(conn.dialect.name)


def store_of(session: Session) -> Store:
    """The session's store: its sessionmaker's (``models.db.Database``), or, for a session made
    on an engine directly (a test's ``Session(engine)``), its bind's, noted in its ``info``."""
    found: Store | None = session.info.get(STORE)
    if found is None:
        found = session.info[STORE] = for_dialect(session.get_bind().dialect.name)
    return found


__all__ = ["POSTGRESQL", "SQLITE", "STORE", "Store", "for_dialect", "for_engine", "store_of", "store_of_connection"]
