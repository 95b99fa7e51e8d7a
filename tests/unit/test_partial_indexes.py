"""The partial indexes say what the pure core says: each ``state`` condition of a task index (and
the queries that repeat it) is one of ``core.states``' sets, and each outbox index's condition one
of ``core.outbox_states``' sets; and the migrations built the indexes with those very conditions.
A state added to the core without the indexes (or the other way round) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import Index, Table

from core import outbox_states, states
from core.states import State
from models import task as task_model
from models.messages import PENDING_CHECK, OutboxMessage
from models.task import ExternalTask, TaskEvent

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = "\n".join(path.read_text() for path in sorted((ROOT / "migrations" / "versions").glob("*.py")))

#: each predicate of models/task.py: the core set its ``state`` condition names
TASK_PREDICATES = {
    "AWAITING_ACCEPTANCE": states.AWAITING_ACCEPTANCE,
    "AWAITING_COMPLETION": states.OPEN,
    "AT_VENDOR": states.AT_VENDOR,
    "NOT_SUBMITTED": states.NOT_SUBMITTED,
    "HEARTBEAT_ARMED": states.AT_VENDOR,
    "POLL_ARMED": states.AT_VENDOR,
    "OPEN": states.OPEN,
    "FINISHED": states.TERMINAL,
    "QUEUED": states.NOT_SUBMITTED,
    "RELEASED_OPEN": states.OPEN,
}


def states_named(predicate: str) -> frozenset[State]:
    """The task states a predicate's ``state`` condition admits, read off its SQL."""
    found = re.search(r"state (=|IN|NOT IN) \(?((?:'[a-z_]+'(?:, )?)+)\)?", predicate)
    assert found is not None, predicate
    named = frozenset(State(value) for value in re.findall(r"'([a-z_]+)'", found.group(2)))
    return frozenset(State) - named if found.group(1) == "NOT IN" else named


@pytest.mark.parametrize("name", sorted(TASK_PREDICATES))
def test_task_predicates_are_the_cores_sets(name):
    assert states_named(getattr(task_model, name)) == TASK_PREDICATES[name]


def test_every_task_predicate_is_checked():
    """A predicate added to models/task.py is added here too."""
    declared = {name for name, value in vars(task_model).items() if name.isupper() and isinstance(value, str)}
    assert declared - {"FINISHED_EVENTS"} == set(TASK_PREDICATES)


def _indexes(table: object) -> list[Index]:
    assert isinstance(table, Table)
    partial = [index for index in table.indexes if index.dialect_options["postgresql"]["where"] is not None]
    return sorted(partial, key=lambda index: str(index.name))


def _where(index: Index) -> str:
    pg, lite = (str(index.dialect_options[d]["where"]) for d in ("postgresql", "sqlite"))
    assert pg == lite, index.name  # one condition for both databases
    return pg


@pytest.mark.parametrize(
    "index", _indexes(ExternalTask.__table__) + _indexes(TaskEvent.__table__), ids=lambda i: str(i.name)
)
def test_each_partial_index_uses_a_declared_predicate_that_a_migration_built(index):
    where = _where(index)
    if "state" in where and index.table.name == "external_tasks":
        assert where in {getattr(task_model, name) for name in TASK_PREDICATES}, index.name
    assert where in MIGRATIONS, f"no migration builds {index.name} as {where}"


def test_the_pending_check_index_is_the_not_done_rows():
    """``done_at IS NULL`` is exactly the core's rows not done: every state but done and dead."""
    (index,) = [i for i in _indexes(OutboxMessage.__table__) if i.name == "ux_outbox_messages_pending_check"]
    assert _where(index) == PENDING_CHECK
    assert PENDING_CHECK.endswith("done_at IS NULL")
    for state, signature in outbox_states.SIGNATURES.items():
        assert (not signature.done) == (state in outbox_states.NOT_DONE)
    assert PENDING_CHECK in MIGRATIONS
