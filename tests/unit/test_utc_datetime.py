"""``models.base.UtcDateTime``: aware UTC datetimes in and out on both databases, converted by one
function per value where the dialect converts nothing itself (PostgreSQL's psycopg)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from models.base import UtcDateTime, _bind_utc, _read_utc

PARIS = timezone(timedelta(hours=1))
NOON_UTC = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _processors(dialect: Dialect) -> tuple[object, object]:
    impl = UtcDateTime().dialect_impl(dialect)
    return impl.bind_processor(dialect), impl.result_processor(dialect, None)


def test_on_postgresql_the_processors_are_the_conversion_itself() -> None:
    bind, read = _processors(postgresql.psycopg.dialect())
    assert (bind, read) == (_bind_utc, _read_utc)  # no TypeDecorator wrapper: one call per value
    assert _bind_utc(datetime(2026, 12, 7, 13, 0, tzinfo=PARIS)) == NOON_UTC
    assert _bind_utc(None) is None and _read_utc(None) is None
    assert _read_utc(datetime(2026, 12, 7, 13, 0, tzinfo=PARIS)).tzinfo is UTC  # type: ignore[union-attr]
    assert _read_utc(datetime(2026, 12, 7, 12, 0)) == NOON_UTC
    with pytest.raises(ValueError, match="naive datetime"):
        _bind_utc(datetime(2026, 12, 7, 12, 0))


def test_on_sqlite_the_dialects_string_conversion_is_kept_and_the_offset_dropped() -> None:
    bind, read = _processors(sqlite.pysqlite.dialect())
    assert callable(bind) and callable(read)
    stored = bind(datetime(2026, 12, 7, 13, 0, tzinfo=PARIS))
    assert stored == "2026-12-07 12:00:00.000000"
    assert read(stored) == NOON_UTC
    with pytest.raises(ValueError, match="naive datetime"):
        bind(datetime(2026, 12, 7, 12, 0))
