"""Which database errors are passing (``models.db.database_unavailable``): the task skeleton retries
them a moment later and the web answers 503; anything else propagates."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from models.db import database_unavailable


def test_a_pool_with_no_connection_free_in_time_is_passing() -> None:
    """No ``DBAPIError`` (the driver was never reached), yet as passing as a dead connection."""
    assert database_unavailable(PoolTimeout("QueuePool limit of size 15 overflow 0 reached, timed out"))


def test_a_server_that_refused_or_dropped_the_connection_is_passing() -> None:
    assert database_unavailable(OperationalError("SELECT 1", {}, Exception("server closed the connection")))
    invalidated = DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True)
    assert database_unavailable(invalidated)


@pytest.mark.parametrize(
    "exc",
    [
        IntegrityError("INSERT", {}, Exception("duplicate key")),
        ProgrammingError("SELEC", {}, Exception("syntax error")),
        DBAPIError("SELECT 1", {}, Exception("?")),
        ValueError("not a database error"),
    ],
)
def test_anything_else_is_not(exc: Exception) -> None:
    assert not database_unavailable(exc)
