"""Declarative base with a constraint naming convention (so Alembic can migrate SQLite in batch
mode) and the column types every table shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer, MetaData, TextClause, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
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
    """Aware UTC datetimes in and out, on both databases (SQLite keeps no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
