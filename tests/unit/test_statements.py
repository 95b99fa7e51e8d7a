"""Statements built once and shared by threads (``models.statements``): a warmed statement compiles
the same in every thread, however many compile it at once. Without the warming, eight threads
compiling a freshly built relay record (a CTE and an aliased entity) at once gave it a cartesian
product in 212 of 300 trials on this machine, with Python switching threads every microsecond."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import ClauseElement

from models.statements import built_once, warmed
from models.store import claims, inbox, outbox
from service.ordering import held_by

THREADS = 8
TRIALS = 40

#: statements that adapt columns (a CTE, an aliased entity, a textual SELECT mapped to an entity), raw
BUILDERS: dict[str, Callable[[], Any]] = {
    "finish_delivered": outbox._finish_delivered_statement.__wrapped__,  # type: ignore[attr-defined]
    "counted_claim": lambda: outbox._start_delivery_statement.__wrapped__(True),  # type: ignore[attr-defined]
    "flag_holding_back": outbox._flag_holding_back.__wrapped__,  # type: ignore[attr-defined]
    "record_and_find": inbox._record_and_find_statement.__wrapped__,  # type: ignore[attr-defined]
    "relay": lambda: claims._relay_statement.__wrapped__(held_by),  # type: ignore[attr-defined]
}


@pytest.fixture
def threads_switch_often() -> Iterator[None]:
    """Python hands the GIL over every microsecond: a compile is interrupted where it would not be."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _compiled_at_once(statement: ClauseElement) -> set[str]:
    """The SQL ``THREADS`` threads compile ``statement`` to, all started together."""
    barrier = threading.Barrier(THREADS)
    found: list[str] = []

    def compile_it() -> None:
        barrier.wait()
        try:
            found.append(str(statement.compile(dialect=postgresql.dialect())))
        except SQLAlchemyError as exc:  # a compile that fails is one of the outcomes counted
            found.append(f"failed: {type(exc).__name__}")

    threads = [threading.Thread(target=compile_it) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return set(found)


@pytest.mark.parametrize("name", BUILDERS)
def test_a_warmed_statement_compiles_the_same_in_every_thread(name: str, threads_switch_often: None) -> None:
    expected = str(BUILDERS[name]().compile(dialect=postgresql.dialect()))
    differing = [trial for trial in range(TRIALS) if _compiled_at_once(warmed(BUILDERS[name]())) != {expected}]
    assert differing == []


def test_built_once_builds_each_statement_once_and_warm_for_every_thread(threads_switch_often: None) -> None:
    calls: list[tuple[Any, ...]] = []

    def build(with_input: bool) -> Any:
        calls.append((with_input,))
        return outbox._start_delivery_statement.__wrapped__(with_input)  # type: ignore[attr-defined]

    get = built_once(build)
    barrier = threading.Barrier(THREADS)
    got: list[Any] = []

    def take() -> None:
        barrier.wait()
        got.append(get(True))

    threads = [threading.Thread(target=take) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert calls == [(True,)] and len({id(statement) for statement in got}) == 1
    assert get(False) is get(False) and calls == [(True,), (False,)]
