"""Reads that each database answers its own way: the read models' (``models.read_models``: the
operators' views and the gauges' scrape).

PostgreSQL bounds a scrape's statements (``SET LOCAL statement_timeout``: transaction-scoped, so
safe behind a transaction pooler), knows a table's size without counting it (``pg_class.reltuples``)
and a query's rows without running it (the planner's estimate, ``EXPLAIN``), and truncates a time
to its minute (``date_trunc``); SQLite has no statement timeout, counts exactly, and buckets
minutes by formatting them (``strftime``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, func, text
from sqlalchemy.orm import Session


class Reads:
    def answer(self, conn: Connection) -> None:
        """A statement that reads nothing: the database answers (``/readyz``), or this raises."""
        conn.execute(_ANSWER)

    def limit_statements(self, conn: Connection, statement_timeout_ms: int) -> None:
        """Bound every statement of the connection's transaction, where the database can: a slow
        scrape must not pile up on a struggling database."""

    def table_estimate(self, session: Session, table: str) -> int:
        """The database's own idea of a table's size, without counting it; 0 where every count is exact."""
        return 0

    def expected_rows(self, session: Session, query: str, params: Mapping[str, Any]) -> int:
        """How many rows ``query`` (a ``SELECT``'s text) would return, without reading them where the
        database can estimate it; counted where every count is exact."""
        return int(session.scalar(text(f"SELECT count(*) FROM ({query}) AS counted"), dict(params)) or 0)

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

    def expected_rows(self, session: Session, query: str, params: Mapping[str, Any]) -> int:
        """The planner's estimate (``EXPLAIN (FORMAT JSON)``: its top plan's rows), nothing read."""
        plan = session.scalar(text(f"EXPLAIN (FORMAT JSON) {query}"), dict(params))
        document = json.loads(plan) if isinstance(plan, str) else plan
        return int(document[0]["Plan"]["Plan Rows"])

    def minute(self, at: Any) -> ColumnElement[Any]:
        return func.date_trunc("minute", at)


_RELTUPLES = text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)")


_ANSWER = text("SELECT 1")
