"""Reads that each database answers its own way: the operators' views and the gauges' scrape.

PostgreSQL bounds a scrape's statements (``SET LOCAL statement_timeout``: transaction-scoped, so
safe behind a transaction pooler), knows a table's size without counting it (``pg_class.reltuples``)
and truncates a time to its minute (``date_trunc``); SQLite has no statement timeout, counts
exactly, and buckets minutes by formatting them (``strftime``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Connection, func, text
from sqlalchemy.orm import Session


class Reads:
    def limit_statements(self, conn: Connection, statement_timeout_ms: int) -> None:
        """Bound every statement of the connection's transaction, where the database can: a slow
        scrape must not pile up on a struggling database."""

    def table_estimate(self, session: Session, table: str) -> int:
        """The database's own idea of a table's size, without counting it; 0 where every count is exact."""
        return 0

    def minute(self, at: Any) -> ColumnElement[Any]:
        """``at``'s minute, as a value to group by (a time, or its text where the database has no such type)."""
        raise NotImplementedError


class SqliteReads(Reads):
    def minute(self, at: Any) -> ColumnElement[Any]:
        return func.strftime("%Y-%m-%d %H:%M", at)


class PostgresReads(Reads):
    def limit_statements(self, conn: Connection, statement_timeout_ms: int) -> None:
        conn.execute(text(f"SET LOCAL statement_timeout = {int(statement_timeout_ms)}"))

    def table_estimate(self, session: Session, table: str) -> int:
        """``pg_class.reltuples``, kept by ANALYZE and autovacuum."""
        value = session.scalar(_RELTUPLES, {"t": table})
        return max(int(value or 0), 0)

    def minute(self, at: Any) -> ColumnElement[Any]:
        return func.date_trunc("minute", at)


_RELTUPLES = text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)")
