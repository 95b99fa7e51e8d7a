"""The store: the statements Liaison sends, per database, behind domain verbs.

One module per table family, each with a PostgreSQL and a SQLite class: ``outbox`` (an outbox
row's life, ``core/outbox_states.py``: its moves, a new row, and the statements that add, claim
and finish rows with their task's timeline), ``inbox`` (a message seen once, and a vendor job's
task found with it), ``locks`` (what serialises writers), ``rate_limits`` (a key's GCRA
slot, on the database's clock), ``reads`` (what the read models,
``models.read_models``, ask where each database answers its own way), ``slots`` (slots and leases: a relay's
slots, and its start counted with them), ``timeline`` (a task's timeline entries: the one verb
that writes one), ``dispatch`` (fair dispatch's counts, choices and release: one class, the same
statements on both), ``endpoint_health`` (a callback endpoint's health row: a failure counted, the
probe, the reset; one class), ``notices`` (notices to people: recorded, claimed, settled, muted; one
class), ``publication`` (what a publication writes on a row, and what a session notes
to publish: the publish hook, ``models.publishing``, stands on it) and ``postgres_rows``
(PostgreSQL's one-statement writes of several rows, which with ``slots`` reaches into the ORM's
bookkeeping to mark what they wrote). A :class:`Store` holds one of each, chosen once from the
engine's dialect when the database is built (``models.db.Database``), as DBOS's
``SystemDatabase.create()`` picks its class from the URL; callers ask :func:`store_of` for their
session's and call its verbs, and never ask which database it is (``tests/unit/
test_store_boundary.py`` counts the places that still do, outside this package, and holds the
count down).

``vendor_jobs`` (what the poll job, reconciliation, the start leases and vendor events ask of
tasks at a vendor) and ``submissions`` (a client's task found again by its correlation id or
Idempotency-Key) run the same statements on both databases: one class each.

``lifecycle``: a task's life off the happy path (deadlines' and heartbeats' claims, a cancel's
look-ups, a pending check, a bulk replay's task locks, which SQLite needs none of); ``attention``:
what needs a person (dead letters a bulk replay takes, incidents by their open key, orphans left
unbound, disabled callback endpoints and their parked relays; one class, the same statements on both).

Also ``admission`` (the submit's client lock, and its load counted under it), ``retention`` (what
pruning finds due, exports and deletes, kind by kind, in batches: one class) and ``credentials``
(clients and their API keys, console sessions, callback tokens: one class).


The tasks' own statements (their writes through the ORM's unit of work) are the one family still
written from its modules; docs/architecture.md "The store" says what is where.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from models.store.admission import ClientAdmission, PostgresAdmission, SqliteAdmission
from models.store.attention import Attention
from models.store.claims import Claims, PostgresClaims, SqliteClaims
from models.store.credentials import Credentials
from models.store.dispatch import FairDispatch
from models.store.endpoint_health import EndpointHealthRows
from models.store.inbox import Inbox, PostgresInbox, SqliteInbox
from models.store.lifecycle import PostgresTaskLifecycle, SqliteTaskLifecycle, TaskLifecycle
from models.store.locks import Locks, PostgresLocks, SqliteLocks
from models.store.notices import Notices
from models.store.outbox import OutboxRows, PostgresOutboxRows, SqliteOutboxRows
from models.store.rate_limits import PostgresRateLimits, RateLimits, SqliteRateLimits
from models.store.reads import PostgresReads, Reads, SqliteReads
from models.store.retention import Pruning
from models.store.slots import PostgresSlots, Slots, SqliteSlots
from models.store.submissions import Submissions
from models.store.timeline import PostgresTimeline, SqliteTimeline, Timeline
from models.store.vendor_jobs import VendorJobs

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
    vendor_jobs: VendorJobs
    submissions: Submissions
    endpoint_health: EndpointHealthRows
    notices: Notices
    lifecycle: TaskLifecycle
    attention: Attention
    admission: ClientAdmission
    retention: Pruning
    credentials: Credentials
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
    vendor_jobs=VendorJobs(),
    submissions=Submissions(),
    endpoint_health=EndpointHealthRows(),  # the same statements on both databases
    notices=Notices(),  # the same statements on both databases
    lifecycle=PostgresTaskLifecycle(),
    attention=Attention(),
    admission=PostgresAdmission(),
    retention=Pruning(),
    credentials=Credentials(),
    claims=PostgresClaims(),
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
    vendor_jobs=VendorJobs(),  # the same statements on both databases
    submissions=Submissions(),  # the same statements on both databases
    endpoint_health=EndpointHealthRows(),
    notices=Notices(),
    lifecycle=SqliteTaskLifecycle(),
    attention=Attention(),  # the same statements on both databases
    admission=SqliteAdmission(),
    retention=Pruning(),  # the same statements on both databases
    credentials=Credentials(),  # the same statements on both databases
    claims=SqliteClaims(),
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
