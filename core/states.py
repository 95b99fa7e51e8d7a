"""The task state machine, as data. Pure: no database, no I/O.

Every state change in Liaison goes through :func:`transition`; every external event goes through
:func:`decide`, which turns "the vendor says X" into either a forward move or a recorded no-op.
States only move forward, terminal states absorb, and a ``completed`` event may skip ``accepted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    REQUESTED = "requested"  # accepted from the domain app, not yet at the vendor
    SUBMITTED = "submitted"  # the vendor gave us a job id
    ACCEPTED = "accepted"  # the vendor said it started
    CANCEL_REQUESTED = "cancel_requested"  # the domain app asked to cancel; vendor not yet confirmed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL: frozenset[State] = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELED})

#: Not final: still counted against a client's cap on open tasks, and against a vendor's capacity
#: once released; its execution deadline still applies.
OPEN: frozenset[State] = frozenset(State) - TERMINAL
#: Not yet accepted by the vendor: its acceptance deadline still applies.
AWAITING_ACCEPTANCE: frozenset[State] = frozenset({State.REQUESTED, State.SUBMITTED})
#: Not yet at the vendor: no job id, the submission still to be made (or settled).
NOT_SUBMITTED: frozenset[State] = frozenset({State.REQUESTED})
#: At the vendor (it holds a job, or a cancel of one is on its way): what heartbeats, polls and
#: reconciliation ask the vendor about.
AT_VENDOR: frozenset[State] = frozenset({State.SUBMITTED, State.ACCEPTED, State.CANCEL_REQUESTED})

#: The sets above by name: the partial indexes of ``models/task.py`` are written from them, and
#: ``tests/unit/test_partial_indexes.py`` holds the two (and the migrations) together.
STATE_SETS: dict[str, frozenset[State]] = {
    "TERMINAL": TERMINAL,
    "OPEN": OPEN,
    "AWAITING_ACCEPTANCE": AWAITING_ACCEPTANCE,
    "NOT_SUBMITTED": NOT_SUBMITTED,
    "AT_VENDOR": AT_VENDOR,
}


def in_order(chosen: frozenset[State]) -> tuple[State, ...]:
    """``chosen`` in the order the states are declared (a lifecycle's order): a stable spelling for SQL."""
    return tuple(state for state in State if state in chosen)


#: Allowed moves. Anything else raises InvalidTransition. Terminal states have no way out.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.REQUESTED: frozenset({State.SUBMITTED, State.ACCEPTED, State.CANCEL_REQUESTED, *TERMINAL}),
    State.SUBMITTED: frozenset({State.ACCEPTED, State.CANCEL_REQUESTED, *TERMINAL}),
    State.ACCEPTED: frozenset({State.CANCEL_REQUESTED, *TERMINAL}),
    # The vendor may finish the job before it sees our cancel: any final state is then the truth.
    State.CANCEL_REQUESTED: frozenset(TERMINAL),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELED: frozenset(),
}

#: How far along a state is; an event that would move a task to a lower rank is stale.
RANK: dict[State, int] = {
    State.REQUESTED: 0,
    State.SUBMITTED: 1,
    State.ACCEPTED: 2,
    State.CANCEL_REQUESTED: 3,
    State.SUCCEEDED: 4,
    State.FAILED: 4,
    State.CANCELED: 4,
}


class StateError(Exception):
    """Root of the state machine's errors."""


class InvalidTransition(StateError):
    def __init__(self, current: State, target: State) -> None:
        super().__init__(f"cannot move a task from {current} to {target}")
        self.current = current
        self.target = target


def transition(current: State | str, target: State | str) -> State:
    """Validate one move and return the new state."""
    current, target = State(current), State(target)
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(current, target)
    return target


#: The one way out of a terminal state: an operator replays the dead letter that failed the task
#: (its submission could not be made). Events never take this path; only ``reopen`` does.
REOPEN: dict[State, State] = {State.FAILED: State.REQUESTED}


def reopen(current: State | str) -> State:
    current = State(current)
    if current not in REOPEN:
        raise InvalidTransition(current, State.REQUESTED)
    return REOPEN[current]


class EventType(StrEnum):
    ACCEPTED = "job.accepted"
    COMPLETED = "job.completed"
    PROGRESS = "job.progress"  # moves no state: relayed as ``task.progress``, latest wins


#: What a ``job.completed`` status means for the task.
COMPLETION_STATES: dict[str, State] = {
    "succeeded": State.SUCCEEDED,
    "failed": State.FAILED,
    "canceled": State.CANCELED,
}


@dataclass(frozen=True)
class Decision:
    """What an event does to a task: ``new_state`` is None when the event is recorded and ignored."""

    new_state: State | None
    reason: str

    @property
    def applies(self) -> bool:
        return self.new_state is not None


def target_of(event_type: EventType | str, status: str | None = None) -> State:
    """The state a vendor event asks for. Raises ValueError for an event we do not understand."""
    event_type = EventType(event_type)
    if event_type is EventType.ACCEPTED:
        return State.ACCEPTED
    if event_type is EventType.PROGRESS:
        raise ValueError("job.progress asks for no state")
    if status not in COMPLETION_STATES:
        raise ValueError(f"job.completed needs status in {sorted(COMPLETION_STATES)}")
    return COMPLETION_STATES[status]


def decide(current: State | str, target: State | str) -> Decision:
    """Forward-only application of an event: a stale or repeated event is a recorded no-op."""
    current, target = State(current), State(target)
    if current in TERMINAL:
        return Decision(None, f"task already {current}")
    if target == current:
        return Decision(None, f"task already {current}")
    if RANK[target] <= RANK[current]:
        return Decision(None, f"{target} is behind {current}")
    return Decision(transition(current, target), "applied")


#: A progress report is relayed while the task is still open; once it is final, none is (a report
#: that comes after the completion never overtakes it).
PROGRESS_CALLBACK = "task.progress"
COMPLETED_CALLBACK = "task.completed"


def relays_progress(current: State | str) -> bool:
    return State(current) not in TERMINAL


#: Which task state changes the domain app hears of, and as which callback type.
RELAYED: dict[State, str] = {
    State.ACCEPTED: "task.accepted",
    State.SUCCEEDED: COMPLETED_CALLBACK,
    State.FAILED: COMPLETED_CALLBACK,
    State.CANCELED: COMPLETED_CALLBACK,
}
