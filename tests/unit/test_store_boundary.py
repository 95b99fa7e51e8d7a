"""The store's walls (``models/store``, docs/architecture.md "The store"): what only the store may do,
counted outside it. Each count is a ratchet: it may go down, never up; lower the number when a
change moves more into the store (the target of each is 0).

- ``dialect.name``: a call site deciding PostgreSQL or SQLite itself, instead of the store chosen
  once when the database is built (``models.store.for_engine``); not counted where SQLAlchemy
  itself hands the code the dialect it is compiling or binding for (:data:`HANDED_THE_DIALECT`);
- SQLAlchemy's private API (``InstanceState._commit_all``, ``set_committed_value``): only the
  store's one-statement writes mark what they wrote in the ORM's bookkeeping;
- writes of an outbox row's lifecycle columns (``core/outbox_states.py``): an assignment to one of
  them, or an ``UPDATE`` of the outbox that sets one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers", "runtime", "service", "models", "foundation", "webhooks", "wire", "core")
STORE = ROOT / "models" / "store"

#: the outbox row's lifecycle columns (core.outbox_states: its states are read off the first four)
LIFECYCLE = frozenset(
    {"done_at", "parked_reason", "dispatched_at", "next_attempt_at", "holds_back", "start_lease_until", "deliveries"}
)
#: attributes of the same names on other tables' rows (a notice's ``dispatched_at``, a task's)
NOT_OUTBOX_RECEIVERS = frozenset({"task", "reopened", "notice", "endpoint"})
#: known writes of a same-named column of another table, by module and column (a notice's
#: ``dispatched_at`` was one, until its settling moved into the store: ``models.store.notices``)
NOT_OUTBOX: frozenset[tuple[str, str]] = frozenset()
PRIVATE_API = re.compile(r"\b_commit_all\b|\bset_committed_value\b|\b_sa_instance_state\b")

#: Where SQLAlchemy hands a function the dialect (a ``TypeDecorator``'s ``process_bind_param``): it
#: asks nothing of the session, and no store is at hand there. (module, function) -> why.
HANDED_THE_DIALECT = {
    ("models/base.py", "process_bind_param"): "UtcDateTime: SQLite keeps no offset, so a UTC time is bound naive",
}

#: Ratchets: the counts at the last change (before the store: 20, 2 modules, 14 modules; after its
#: first room: 2, 0, 1; after the publication's stamp and the slots moved in: 0, 0, 0). Lower them, never raise them.
MAX_DIALECT_NAME = 0
MAX_PRIVATE_API_MODULES = 0
MAX_LIFECYCLE_WRITERS = 0


def outside_store() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if STORE not in path.parents and ".venv" not in path.parts
    )


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def dialect_name_uses() -> dict[str, int]:
    found = {_name(path): _asked(_name(path), path.read_text()) for path in outside_store()}
    return {name: count for name, count in found.items() if count}


def _asked(module: str, source: str) -> int:
    """``dialect.name`` in ``source``, but for the functions SQLAlchemy hands the dialect to."""
    handed = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and (module, node.name) in HANDED_THE_DIALECT:
            handed += (ast.get_source_segment(source, node) or "").count("dialect.name")
    return source.count("dialect.name") - handed


def private_api_modules() -> set[str]:
    return {_name(path) for path in outside_store() if PRIVATE_API.search(path.read_text())}


def lifecycle_writers() -> dict[str, set[str]]:
    """Modules outside the store that write an outbox row's lifecycle columns, with the columns."""
    writers: dict[str, set[str]] = {}
    for path in outside_store():
        source = path.read_text()
        for column in _lifecycle_writes(source):
            if (_name(path), column) not in NOT_OUTBOX:
                writers.setdefault(_name(path), set()).add(column)
    return writers


def _lifecycle_writes(source: str) -> set[str]:
    written: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in LIFECYCLE and not _other_table(target.value):
                written.add(target.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values":
            segment = ast.get_source_segment(source, node.func.value) or ""
            if "OutboxMessage" in segment or "outbox" in segment.lower():
                written |= {kw.arg for kw in node.keywords if kw.arg in LIFECYCLE}
    return written


def _other_table(receiver: ast.expr) -> bool:
    name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
    return any(word in name.lower() for word in NOT_OUTBOX_RECEIVERS)


def test_dialect_name_is_asked_only_in_the_store():
    found = dialect_name_uses()
    assert sum(found.values()) <= MAX_DIALECT_NAME, f"dialect.name outside models/store: {found}"


def test_each_function_handed_the_dialect_still_asks_it_and_is_handed_it():
    """The exceptions stay true: each function asks ``dialect.name`` of a ``dialect`` parameter."""
    for (module, function), _reason in HANDED_THE_DIALECT.items():
        source = (ROOT / module).read_text()
        found = [
            node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) and node.name == function
        ]
        assert found, f"{module}: no {function}"
        for node in found:
            assert "dialect" in [arg.arg for arg in node.args.args], f"{module}:{function} is handed no dialect"
            assert "dialect.name" in (ast.get_source_segment(source, node) or "")


def test_the_orms_private_api_is_used_only_in_the_store():
    found = private_api_modules()
    assert len(found) <= MAX_PRIVATE_API_MODULES, f"SQLAlchemy's private API outside models/store: {found}"


def test_the_outbox_rows_life_is_written_only_in_the_store():
    found = lifecycle_writers()
    assert len(found) <= MAX_LIFECYCLE_WRITERS, f"writers of outbox lifecycle columns outside models/store: {found}"


def test_the_counters_see_what_they_count():
    """Each counter finds the writes of the store itself: it would find them anywhere."""
    store_sources = [path.read_text() for path in STORE.rglob("*.py")]
    assert any("dialect.name" in source for source in store_sources)
    assert any(PRIVATE_API.search(source) for source in store_sources)
    assert set().union(*(_lifecycle_writes(source) for source in store_sources)) == LIFECYCLE
