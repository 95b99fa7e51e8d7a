"""Serialisation: what one transaction takes so that another waits, or does nothing.

PostgreSQL takes transaction-scoped advisory locks (``pg_advisory_xact_lock``, never a session
lock: a transaction pooler would leave it held on a backend another client gets next;
docs/architecture.md "Behind a transaction pooler") and row locks. SQLite has neither and needs
none: every transaction there starts with ``BEGIN IMMEDIATE`` (``models.db``), so writers are
serialised already and each lock is a no-op. The callers say what they serialise; the two classes
say how.
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import BigInteger, bindparam, func, select
from sqlalchemy.orm import Session


class Locks:
    """The verbs both databases answer."""

    #: Are writers serialised by the database itself (every transaction one at a time)? Then a
    #: first look is the last word, and nothing need be locked to make it so.
    serialises_writers: ClassVar[bool] = False

    def lock(self, session: Session, key: int) -> bool:
        """Take the transaction's lock ``key`` (waiting for it); False: nothing to take here."""
        raise NotImplementedError

    def try_lock(self, session: Session, key: int) -> bool:
        """Take the transaction's lock ``key`` if it is free; False: another transaction holds it."""
        raise NotImplementedError


class SqliteLocks(Locks):
    serialises_writers = True

    def lock(self, session: Session, key: int) -> bool:
        return False  # BEGIN IMMEDIATE serialised this transaction already

    def try_lock(self, session: Session, key: int) -> bool:
        return True


class PostgresLocks(Locks):
    def lock(self, session: Session, key: int) -> bool:
        session.execute(_LOCK, {"key": key})
        return True

    def try_lock(self, session: Session, key: int) -> bool:
        return bool(session.scalar(_TRY_LOCK, {"key": key}))


#: the lock as a column (a function of a SELECT list runs as each row is produced, before
#: ``FOR UPDATE`` locks it): a caller's statement may take it before its row locks
LOCK_KEY = func.pg_advisory_xact_lock(bindparam("key", type_=BigInteger))
_LOCK = select(LOCK_KEY)
_TRY_LOCK = select(func.pg_try_advisory_xact_lock(bindparam("key", type_=BigInteger)))
