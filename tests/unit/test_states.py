"""The task state machine (core.states): allowed moves, absorbing terminals, forward-only events."""

from __future__ import annotations

import itertools
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.states import (
    COMPLETION_STATES,
    RANK,
    RELAYED,
    TERMINAL,
    TRANSITIONS,
    Decision,
    EventType,
    InvalidTransition,
    State,
    StateError,
    decide,
    reopen,
    target_of,
    transition,
)

ALL_PAIRS = list(itertools.product(State, State))


# --- transition(): the table is the whole truth ------------------------------------------------


NOT_FINAL = frozenset(State) - TERMINAL


def test_table_covers_every_state():
    """Every state has an entry in TRANSITIONS and a RANK; TERMINAL and the rest partition State."""
    assert set(TRANSITIONS) == set(State)
    assert set(RANK) == set(State)
    assert frozenset(State) > TERMINAL and NOT_FINAL and not TERMINAL & NOT_FINAL
    assert {State.SUCCEEDED, State.FAILED, State.CANCELED} == TERMINAL


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_transition_matches_table_for_every_pair(current, target):
    """A listed move returns the target; any other pair raises InvalidTransition naming both states."""
    if target in TRANSITIONS[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition) as info:
            transition(current, target)
        assert info.value.current is current
        assert info.value.target is target
        assert isinstance(info.value, StateError)
        assert str(current) in str(info.value) and str(target) in str(info.value)


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_transition_accepts_plain_strings(current, target):
    """Strings are coerced to State: the same answer as with enum members."""
    if target in TRANSITIONS[current]:
        assert transition(current.value, target.value) is target
    else:
        with pytest.raises(InvalidTransition):
            transition(current.value, target.value)


def test_transition_rejects_unknown_state_names():
    """A string that is no State is a ValueError, not a silent move."""
    with pytest.raises(ValueError):
        transition("requested", "exploded")
    with pytest.raises(ValueError):
        transition("nowhere", "submitted")


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
def test_terminal_states_absorb(terminal):
    """No move leaves a terminal state, not even to itself."""
    assert TRANSITIONS[terminal] == frozenset()
    for target in State:
        with pytest.raises(InvalidTransition):
            transition(terminal, target)


def test_no_self_loops_and_table_only_moves_forward():
    """Every allowed move strictly increases RANK (so the table alone can never go backwards)."""
    for current, targets in TRANSITIONS.items():
        assert current not in targets
        for target in targets:
            assert RANK[target] > RANK[current], (current, target)


def test_every_active_state_can_reach_every_terminal():
    """The vendor may finish a job at any point: each active state may jump straight to any end."""
    for current in NOT_FINAL:
        assert TRANSITIONS[current] >= TERMINAL


# --- decide(): forward-only application of vendor events --------------------------------------


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_decide_never_raises_and_agrees_with_transition(current, target):
    """decide() turns any pair into a Decision; when it applies, the move is one transition() allows."""
    decision = decide(current, target)
    assert isinstance(decision, Decision)
    assert decision.reason
    if decision.applies:
        assert decision.new_state is target
        assert target in TRANSITIONS[current]
        assert decision.reason == "applied"
    else:
        assert decision.new_state is None
        assert current in TERMINAL or RANK[target] <= RANK[current]


@given(st.sampled_from(list(State)), st.lists(st.sampled_from(list(State)), max_size=30))
def test_decide_is_forward_only(start, events):
    """For any event sequence: RANK never decreases, and once terminal the state never changes."""
    state = start
    for target in events:
        decision = decide(state, target)
        new = cast(State, decision.new_state) if decision.applies else state  # applies: new_state is set
        assert RANK[new] >= RANK[state]
        if state in TERMINAL:
            assert not decision.applies
            assert new is state
        state = new


@given(st.lists(st.sampled_from([t for t in State if t is not State.REQUESTED]), max_size=30))
def test_decide_from_requested_reaches_the_highest_event_seen(events):
    """Applying events from `requested` ends in the first terminal seen, else the highest-ranked state."""
    state = State.REQUESTED
    for target in events:
        decision = decide(state, target)
        if decision.applies:
            assert decision.new_state is not None
            state = decision.new_state
    first_terminal = next((t for t in events if t in TERMINAL), None)
    if first_terminal is not None:
        assert state is first_terminal
    elif events:
        assert RANK[state] == max(RANK[t] for t in events)
    else:
        assert state is State.REQUESTED


def test_completed_before_accepted_skips_ahead():
    """A `completed` that overtakes `accepted` moves submitted → succeeded directly."""
    decision = decide(State.SUBMITTED, target_of(EventType.COMPLETED, "succeeded"))
    assert decision == Decision(State.SUCCEEDED, "applied")
    assert decision.applies


def test_late_accepted_after_succeeded_is_ignored_with_reason():
    """The overtaken `accepted` arriving afterwards is a recorded no-op saying why."""
    decision = decide(State.SUCCEEDED, target_of(EventType.ACCEPTED))
    assert not decision.applies
    assert decision.new_state is None
    assert "succeeded" in decision.reason


def test_accepted_after_cancel_requested_is_ignored():
    """Once we asked to cancel, a vendor `accepted` does not pull the task back."""
    decision = decide(State.CANCEL_REQUESTED, State.ACCEPTED)
    assert not decision.applies
    assert decision.reason == "accepted is behind cancel_requested"


def test_cancel_requested_then_completed_applies():
    """The vendor may finish before it sees our cancel: any final state is then the truth."""
    for final in TERMINAL:
        assert decide(State.CANCEL_REQUESTED, final) == Decision(final, "applied")


def test_repeated_event_is_a_no_op():
    """The same state twice (a redelivery) is ignored, whatever the state."""
    for state in State:
        decision = decide(state, state)
        assert not decision.applies
        assert decision.reason == f"task already {state}"


def test_terminal_to_other_terminal_is_ignored():
    """A second, different `completed` after the task ended does not overwrite the outcome."""
    decision = decide(State.FAILED, State.SUCCEEDED)
    assert not decision.applies
    assert decision.reason == "task already failed"


def test_decide_accepts_strings():
    assert decide("submitted", "accepted") == Decision(State.ACCEPTED, "applied")


# --- target_of() ----------------------------------------------------------------------------


def test_target_of_accepted_ignores_status():
    assert target_of(EventType.ACCEPTED) is State.ACCEPTED
    assert target_of("job.accepted", "whatever") is State.ACCEPTED


@pytest.mark.parametrize(("status", "state"), sorted(COMPLETION_STATES.items()))
def test_target_of_completed_maps_status(status, state):
    assert target_of("job.completed", status) is state


@pytest.mark.parametrize("status", [None, "", "SUCCEEDED", "accepted", "done", "cancelled"])
def test_target_of_completed_rejects_bad_status(status):
    """job.completed with a status we do not know is a ValueError, never a guess."""
    with pytest.raises(ValueError):
        target_of(EventType.COMPLETED, status)


@pytest.mark.parametrize("event_type", ["job.started", "", "accepted", "JOB.ACCEPTED"])
def test_target_of_rejects_unknown_event_type(event_type):
    with pytest.raises(ValueError):
        target_of(event_type, "succeeded")


# --- RELAYED --------------------------------------------------------------------------------


def test_relayed_mapping():
    """The domain app hears of acceptance and of every end, nothing else."""
    assert RELAYED == {
        State.ACCEPTED: "task.accepted",
        State.SUCCEEDED: "task.completed",
        State.FAILED: "task.completed",
        State.CANCELED: "task.completed",
    }
    for quiet in (State.REQUESTED, State.SUBMITTED, State.CANCEL_REQUESTED):
        assert quiet not in RELAYED


def test_only_a_failed_task_can_be_reopened_and_it_goes_back_to_requested() -> None:
    assert reopen(State.FAILED) is State.REQUESTED
    assert reopen("failed") is State.REQUESTED


@pytest.mark.parametrize("state", [s for s in State if s is not State.FAILED])
def test_no_other_state_can_be_reopened(state: State) -> None:
    with pytest.raises(InvalidTransition):
        reopen(state)


def test_reopen_is_no_event_path() -> None:
    """Events never leave a terminal state; only an operator's replay (``reopen``) does."""
    for event in (EventType.ACCEPTED, EventType.COMPLETED):
        assert (
            decide(State.FAILED, target_of(event, "succeeded" if event is EventType.COMPLETED else None)).new_state
            is None
        )
