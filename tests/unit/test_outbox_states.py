"""An outbox row's life as data (core.outbox_states): its states read off its columns, its moves."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.outbox_states import (
    FINISHED,
    HOLDING,
    MOVES,
    NOT_DONE,
    SIGNATURES,
    SWEPT,
    InvalidMove,
    Move,
    ParkedReason,
    RowState,
    apply,
    matches,
    moves_from,
    state_of,
)

REASONS: tuple[str | None, ...] = (None, *(reason.value for reason in ParkedReason))
#: every combination of the four lifecycle columns the row can hold
COLUMNS: list[dict[str, Any]] = [
    {"done": done, "parked_reason": reason, "dispatched": dispatched, "due": due}
    for done, reason, dispatched, due in itertools.product((False, True), REASONS, (False, True), (False, True))
]


def test_every_state_has_a_signature_and_a_way_in():
    assert set(SIGNATURES) == set(RowState)
    targets = {step.target for step in MOVES.values()}
    assert targets == set(RowState)


@pytest.mark.parametrize("columns", COLUMNS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_state_of_reads_every_combination_and_agrees_with_the_signatures(columns):
    """Total: every combination of the columns is some state; sound: one that fits a state's
    signature (what a move into it writes) is read back as that state (done stands for dead too)."""
    read = state_of(**columns)
    fitting = {state for state in RowState if matches(state, **columns)}
    assert fitting <= {read, RowState.DEAD} if read is RowState.DONE else fitting <= {read}


@pytest.mark.parametrize("state", list(RowState))
def test_each_signature_is_written_by_some_combination(state):
    assert any(matches(state, **columns) for columns in COLUMNS)


def test_dead_is_told_by_its_letter():
    assert state_of(done=True, parked_reason=None, dispatched=True, due=False) is RowState.DONE
    assert state_of(done=True, parked_reason=None, dispatched=True, due=False, dead_lettered=True) is RowState.DEAD


def test_finished_rows_move_only_by_replay():
    assert moves_from(RowState.DONE) == frozenset()
    assert moves_from(RowState.DEAD) == {Move.REPLAY}
    with pytest.raises(InvalidMove):
        apply(RowState.DONE, Move.PUBLISH)


def test_every_row_not_done_can_finish_or_be_dead_lettered():
    for state in NOT_DONE:
        assert {Move.FINISH, Move.DEAD_LETTER} <= moves_from(state)


def test_parked_and_queued_rows_wait_for_something_to_release_them():
    """Neither the sweep nor time moves them: only an operator (unpark) or fair dispatch (release)."""
    assert moves_from(RowState.PARKED) - {Move.FINISH, Move.DEAD_LETTER} == {Move.UNPARK}
    assert moves_from(RowState.QUEUED) - {Move.FINISH, Move.DEAD_LETTER} == {Move.RELEASE}
    assert RowState.PARKED not in SWEPT and RowState.QUEUED not in SWEPT


def test_the_sets_partition_as_the_ordering_rule_needs():
    assert set(RowState) == NOT_DONE | FINISHED and not NOT_DONE & FINISHED
    assert HOLDING <= NOT_DONE
    assert RowState.PARKED not in HOLDING  # a relay parked for a person holds nothing (core.ordering.GAPS)


@given(st.lists(st.sampled_from(list(Move)), max_size=30))
def test_any_run_of_moves_stays_in_the_table(moves):
    """Applying allowed moves from a new row never reaches a state the table does not list, and
    a finished row changes only by a replay."""
    state = RowState.UNSENT
    for move in moves:
        if move not in moves_from(state):
            with pytest.raises(InvalidMove):
                apply(state, move)
            continue
        before, state = state, apply(state, move)
        assert state in RowState
        if before in FINISHED:
            assert move is Move.REPLAY


@given(st.sampled_from(list(RowState)))
def test_done_is_reachable_from_every_state_but_dead_through_replay(start):
    seen, frontier = {start}, [start]
    while frontier:
        state = frontier.pop()
        for move in moves_from(state):
            target = apply(state, move)
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    assert RowState.DONE in seen
