"""Statements built once and shared by every thread: each compiled once, in the thread that built
it, before any other thread can run it.

SQLAlchemy fills some of a statement's indexes lazily, on its first compile, and not thread-safely:
the proxy index of a column collection (``ColumnCollection._init_proxy_index``) that adapting an
``aliased()`` entity or a CTE's columns looks columns up in, and the adapter's column memo. Several
threads compiling a new statement at once (a threads-pool worker taking a backlog at start: the
relay's 64 threads) can read a half-built index, leave a column of a CTE unadapted, select it from
the table as well (a cartesian product), and keep that compiled form in the engine's cache for the
life of the process. In ``bench/e2e.py`` one relay worker failed every relay's record this way
(``MultipleResultsFound`` from ``service.claims.finish_delivered``) until it was restarted.
Compiled once before it is shared, a statement's indexes are full, and later compiles only read
them (``tests/unit/test_statements.py`` compiles warmed statements from eight threads at once).

Statements written out as text (``models.base.upsert``) or over one table (an ``IN`` subquery of
it included) adapt no column and are built at import; those that adapt columns (a CTE's, an
``aliased()`` entity's, ``from_statement``) are built by a :func:`built_once` builder. Hot statements are built
once anyway (building one, and its cache key, on every call costs more CPU than running it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement

P = ParamSpec("P")
S = TypeVar("S", bound=ClauseElement)

#: any dialect fills the same indexes; PostgreSQL's compiles every statement of ours
_WARMING_DIALECT = postgresql.dialect()


def warmed(statement: S) -> S:
    """``statement``, compiled once now, so that its lazily built indexes are full before it is shared."""
    statement.compile(dialect=_WARMING_DIALECT)
    return statement


def built_once(builder: Callable[P, S]) -> Callable[P, S]:
    """``functools.cache`` for a statement builder, made safe for threads: one thread builds and
    warms (:func:`warmed`) each statement, under a lock, before any caller gets it."""
    built: dict[Hashable, S] = {}
    lock = threading.Lock()

    @wraps(builder)
    def statement(*args: P.args, **kwargs: P.kwargs) -> S:
        key: Any = (args, tuple(sorted(kwargs.items())))
        found = built.get(key)
        if found is None:
            with lock:
                found = built.get(key)
                if found is None:
                    found = built[key] = warmed(builder(*args, **kwargs))
        return found

    return statement
