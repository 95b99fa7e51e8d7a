"""Declarative base with a constraint naming convention (so Alembic can migrate SQLite in batch
mode) and the column types every table shares."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer, MetaData, TextClause, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: 64-bit ids on PostgreSQL; SQLite only auto-increments a column declared INTEGER.
Id = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(JSONB(), "postgresql")


def upsert(sql: str, **types: Any) -> TextClause:
    """An ``INSERT … ON CONFLICT …`` statement, written out: one statement where a savepoint, an
    INSERT and an IntegrityError would be three round trips. PostgreSQL and SQLite (3.35+) share
    the syntax. Text, not the dialects' ``insert().on_conflict_*()``: SQLAlchemy 2.0 cannot cache
    those (``inherit_cache = False``), and compiling one afresh for every webhook cost more than the
    round trips it saves. ``types`` gives the bound parameters' column types (``UtcDateTime``)."""
    return text(sql).bindparams(*(bindparam(name, type_=type_) for name, type_ in types.items()))


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out, on both databases (SQLite keeps no offset).

    Where the dialect's own ``DateTime`` converts nothing (psycopg hands datetimes over as they are),
    the processors below are the conversion itself: ``TypeDecorator``'s own wrap each in a function
    that calls it, one Python call more per value bound or read (144 per happy-path job on
    PostgreSQL, tests/integration/test_statement_budget.py). Where it converts (SQLite's strings),
    ``TypeDecorator`` chains the two as it always has."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        value = _bind_utc(value)
        return value.replace(tzinfo=None) if value is not None and dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return _read_utc(value)

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        if self.impl_instance.bind_processor(dialect) is not None:
            return super().bind_processor(dialect)
        return _bind_utc

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], datetime | None] | None:
        if self.impl_instance.result_processor(dialect, coltype) is not None:
            return super().result_processor(dialect, coltype)
        return _read_utc


def _bind_utc(value: datetime | None) -> datetime | None:
    """An aware datetime in UTC (a naive one refused): what a dialect that keeps offsets is given."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return value.astimezone(UTC)


def _read_utc(value: datetime | None) -> datetime | None:
    """An aware UTC datetime from what the database gave (SQLite's naive ones are UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
