""" "service/ holds no select, update or text, and no database checks" (docs/architecture.md "The
store"): the statements the use cases, the runtime and the worker edge build themselves, counted.

Each count was a ratchet while the statements moved behind the store's verbs (``models/store``);
all are at zero now, and a new statement in ``service/``, ``runtime/`` or ``workers/`` goes behind
a verb instead. Counted are calls of SQLAlchemy's
statement builders by name (``select(…)``, ``update(…)``, ``insert(…)``, ``delete(…)``,
``text(…)``) and the places that ask what the database does (``.dialect``, a store's
``serialises_writers``) rather than call a verb that knows.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILDERS = frozenset({"select", "update", "insert", "delete", "text"})
#: what a call site asks of the database instead of calling a verb
DATABASE_FLAGS = frozenset({"dialect", "serialises_writers"})

#: Ratchets, at zero since issue 42's statements all moved behind the store's verbs (from select 128,
#: update 5, delete 6, text 34 and 3 database flags at its start): a statement built here goes behind
#: a verb instead.
MAX_BUILDERS = {"select": 0, "update": 0, "insert": 0, "delete": 0, "text": 0}
MAX_DATABASE_FLAGS = 0


def modules() -> list[Path]:
    return (
        sorted((ROOT / "service").glob("*.py"))
        + sorted((ROOT / "runtime").rglob("*.py"))  # the outbox sweep, the limiter (moved from workers/)
        + sorted((ROOT / "workers").rglob("*.py"))
    )


def counts(source: str) -> tuple[Counter[str], int]:
    """Statement builders called by name, and database flags asked, in ``source``."""
    builders: Counter[str] = Counter()
    flags = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS:
            builders[node.func.id] += 1
        elif isinstance(node, ast.Attribute) and node.attr in DATABASE_FLAGS:
            flags += 1
    return builders, flags


def found() -> tuple[Counter[str], int, dict[str, int]]:
    total: Counter[str] = Counter()
    flags = 0
    by_module: dict[str, int] = {}
    for path in modules():
        builders, asked = counts(path.read_text())
        total += builders
        flags += asked
        if builders or asked:
            by_module[path.relative_to(ROOT).as_posix()] = sum(builders.values()) + asked
    return total, flags, by_module


def test_service_and_workers_build_no_more_statements_than_before():
    total, _, by_module = found()
    over = {name: total[name] for name in BUILDERS if total[name] > MAX_BUILDERS[name]}
    assert not over, f"statement builders over the ratchet {MAX_BUILDERS}: {over}; by module: {by_module}"


def test_service_and_workers_ask_the_database_no_more_than_before():
    _, flags, by_module = found()
    assert flags <= MAX_DATABASE_FLAGS, f"database flags asked outside the store: {flags}; by module: {by_module}"


def test_the_counter_sees_what_it_counts():
    sample = (
        "q = select(A).where(x)\nu = update(T)\ni = insert(T)\nd = delete(T)\nt = text('SELECT 1')\n"
        "if store.locks.serialises_writers or conn.dialect.name: pass\n"
    )
    builders, flags = counts(sample)
    assert builders == Counter(dict.fromkeys(BUILDERS, 1))
    assert flags == 2
