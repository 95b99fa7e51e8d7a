"""An outbox row's life, as data (``core/states.py`` is the same for a task). Pure: no database, no I/O.

An outbox row (``models.messages.OutboxMessage``) is work a state change caused: a submission, a
callback, a check. Its state is not a column of its own: it is told by four of its columns, and
:func:`state_of` reads it off them. :data:`SIGNATURES` says which columns mean which state, the
store (``models/store``) writes each move's columns from it, and ``tests/middle/
test_store_contract.py`` checks after every verb that the row is in the state :data:`MOVES` says.

| state | ``done_at`` | ``parked_reason`` | ``dispatched_at`` | ``next_attempt_at`` |
|---|---|---|---|---|
| queued (its task waits its turn in fair dispatch) | null | ``queued`` | null | any |
| unsent (written, or the broker refused it: the sweep publishes it) | null | null | null | null |
| published (its message is out; a countdown retry's too) | null | null | set | any |
| held (waits in the database until its due time) | null | null | null | set |
| awaiting an earlier relay of its task | null | ``awaiting_earlier`` | any | its recheck, until the sweep's |
| parked (its callback endpoint answered 410 Gone: waits for a person) | null | ``endpoint_gone`` | null | null |
| done | set | any | any | any |
| dead (done, with a dead letter: that row says which) | set | any | any | any |

A *paused* row (its callback endpoint is paused after failing, past ``LIAISON_MAX_COUNTDOWN_S``)
is a held row: the same columns, another reason (:class:`HoldReason`), none of which is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RowState(StrEnum):
    QUEUED = "queued"
    UNSENT = "unsent"
    PUBLISHED = "published"
    HELD = "held"
    AWAITING_EARLIER = "awaiting_earlier"
    PARKED = "parked"
    DONE = "done"
    DEAD = "dead"


class ParkedReason(StrEnum):
    """The values of ``parked_reason``: why a row that is not done waits unpublished."""

    #: a submission whose task waits its turn in fair dispatch (``service.dispatch``)
    QUEUED = "queued"
    #: a relay held until an earlier relay of its task is settled (``service.ordering``)
    AWAITING_EARLIER = "awaiting_earlier"
    #: a relay whose callback endpoint answered 410 Gone (``service.dead_letters.park``)
    ENDPOINT_GONE = "endpoint_gone"


class HoldReason(StrEnum):
    """Why a row is held until ``next_attempt_at``: none is stored, all look alike."""

    RETRY = "retry"  # a failed attempt's retry, due past the longest countdown
    SLOT_WAIT = "slot_wait"  # a provider's rate limit had no slot soon enough
    ENDPOINT_PAUSED = "endpoint_paused"  # its callback endpoint is paused after failing
    EARLIER_CHANNEL_ROW = "earlier_channel_row"  # an earlier channel row of its task waits for a retry


#: ``None`` in a signature: the column may be either (set or null)
ANY = None


@dataclass(frozen=True)
class Signature:
    """Which of a row's lifecycle columns a move into a state leaves set (True set, False null,
    None either), and its ``parked_reason`` (None: null; ANY_REASON: whatever it was)."""

    done: bool
    parked_reason: ParkedReason | str | None
    dispatched: bool | None
    due: bool | None


#: a signature's ``parked_reason`` when the state does not look at it (a finished row keeps its last)
ANY_REASON = "*"

SIGNATURES: dict[RowState, Signature] = {
    RowState.QUEUED: Signature(done=False, parked_reason=ParkedReason.QUEUED, dispatched=False, due=ANY),
    RowState.UNSENT: Signature(done=False, parked_reason=None, dispatched=False, due=False),
    RowState.PUBLISHED: Signature(done=False, parked_reason=None, dispatched=True, due=ANY),
    RowState.HELD: Signature(done=False, parked_reason=None, dispatched=False, due=True),
    RowState.AWAITING_EARLIER: Signature(
        done=False, parked_reason=ParkedReason.AWAITING_EARLIER, dispatched=ANY, due=ANY
    ),
    RowState.PARKED: Signature(done=False, parked_reason=ParkedReason.ENDPOINT_GONE, dispatched=False, due=False),
    RowState.DONE: Signature(done=True, parked_reason=ANY_REASON, dispatched=ANY, due=ANY),
    RowState.DEAD: Signature(done=True, parked_reason=ANY_REASON, dispatched=ANY, due=ANY),
}

FINISHED: frozenset[RowState] = frozenset({RowState.DONE, RowState.DEAD})
#: not done: ``done_at IS NULL`` (the pending-check index, the sweep, a consumer's claim)
NOT_DONE: frozenset[RowState] = frozenset(RowState) - FINISHED
#: what still holds its task's later relays back (``core.ordering.HOLDING``, ``service.ordering.holding``):
#: not done, and not waiting for a person nor for fair dispatch
HOLDING: frozenset[RowState] = frozenset(
    {RowState.UNSENT, RowState.PUBLISHED, RowState.HELD, RowState.AWAITING_EARLIER}
)
#: what the outbox sweep may publish once due (``runtime.outbox``): the same rows
SWEPT: frozenset[RowState] = HOLDING
#: waiting in the database for something other than time: a person, or fair dispatch
WAITING_UNPUBLISHED: frozenset[RowState] = frozenset({RowState.QUEUED, RowState.PARKED})

#: The state sets by name, for the tests that hold the store's statements and indexes to them.
ROW_SETS: dict[str, frozenset[RowState]] = {
    "FINISHED": FINISHED,
    "NOT_DONE": NOT_DONE,
    "HOLDING": HOLDING,
    "SWEPT": SWEPT,
}


class Move(StrEnum):
    """The verbs of a row's life; the store (``models/store``) has one for each that writes columns."""

    PUBLISH = "publish"  # stamped: a new row, the sweep's (re-)publish, a replay, a released relay
    UNSTAMP = "unstamp"  # the broker refused its message: the sweep publishes it later
    RELEASE = "release"  # fair dispatch released its task
    REQUEUE = "requeue"  # its start lease ran out before anything started: back in its client's queue
    RETRY_BY_COUNTDOWN = "retry_by_countdown"  # a failed attempt (or a slot wait) retried by a Celery countdown
    HOLD_UNTIL = "hold_until"  # a retry or wait past the longest countdown, held in the database
    AWAIT_EARLIER = "await_earlier"  # an earlier relay of its task is still on its way
    RECHECK = "recheck"  # the sweep re-publishes a held relay at its recheck time, should a release be missed
    RESUME = "resume"  # a held relay runs: what held it is settled (or the sweep rechecks it)
    PARK = "park"  # its callback endpoint answered 410 Gone
    UNPARK = "unpark"  # an operator re-enabled the endpoint
    FINISH = "finish"  # done: delivered, answered, skipped, canceled
    DEAD_LETTER = "dead_letter"  # could not be done (or poison): a dead letter holds it
    REPLAY = "replay"  # an operator replays its dead letter


@dataclass(frozen=True)
class Step:
    sources: frozenset[RowState]
    target: RowState


def _from(*states: RowState) -> frozenset[RowState]:
    return frozenset(states)


#: Allowed moves: from which states, to which. A consumer may meet a row in any state that is not
#: done (a second copy of its message, the sweep's re-publish), so finishing it is allowed from all.
MOVES: dict[Move, Step] = {
    Move.PUBLISH: Step(_from(RowState.UNSENT, RowState.PUBLISHED, RowState.HELD), RowState.PUBLISHED),
    Move.UNSTAMP: Step(_from(RowState.PUBLISHED), RowState.UNSENT),
    Move.RELEASE: Step(_from(RowState.QUEUED), RowState.PUBLISHED),
    Move.REQUEUE: Step(_from(RowState.PUBLISHED, RowState.UNSENT), RowState.QUEUED),
    Move.RETRY_BY_COUNTDOWN: Step(_from(RowState.PUBLISHED), RowState.PUBLISHED),
    Move.HOLD_UNTIL: Step(_from(RowState.PUBLISHED, RowState.UNSENT, RowState.HELD), RowState.HELD),
    Move.AWAIT_EARLIER: Step(
        _from(RowState.PUBLISHED, RowState.UNSENT, RowState.HELD, RowState.AWAITING_EARLIER),
        RowState.AWAITING_EARLIER,
    ),
    Move.RECHECK: Step(_from(RowState.AWAITING_EARLIER), RowState.AWAITING_EARLIER),
    Move.RESUME: Step(_from(RowState.AWAITING_EARLIER), RowState.PUBLISHED),
    Move.PARK: Step(_from(RowState.PUBLISHED, RowState.UNSENT, RowState.HELD), RowState.PARKED),
    Move.UNPARK: Step(_from(RowState.PARKED), RowState.PUBLISHED),
    Move.FINISH: Step(NOT_DONE, RowState.DONE),
    Move.DEAD_LETTER: Step(NOT_DONE, RowState.DEAD),
    Move.REPLAY: Step(_from(RowState.DEAD), RowState.UNSENT),
}


class InvalidMove(ValueError):
    def __init__(self, current: RowState, move: Move) -> None:
        super().__init__(f"an outbox row cannot {move} when {current}")
        self.current = current
        self.move = move


def apply(current: RowState | str, move: Move | str) -> RowState:
    """Validate one move of a row and return its new state."""
    current, move = RowState(current), Move(move)
    step = MOVES[move]
    if current not in step.sources:
        raise InvalidMove(current, move)
    return step.target


def moves_from(current: RowState | str) -> frozenset[Move]:
    """Every move a row in ``current`` may make."""
    current = RowState(current)
    return frozenset(move for move, step in MOVES.items() if current in step.sources)


def state_of(
    *, done: bool, parked_reason: str | None, dispatched: bool, due: bool, dead_lettered: bool = False
) -> RowState:
    """A row's state read off its columns (:data:`SIGNATURES`): ``done`` (``done_at`` set),
    ``parked_reason``, ``dispatched`` (``dispatched_at`` set), ``due`` (``next_attempt_at`` set);
    ``dead_lettered``: a dead letter names it (that row, not the outbox row's, tells dead from done)."""
    if done:
        return RowState.DEAD if dead_lettered else RowState.DONE
    if parked_reason is not None:
        return _PARKED_STATE[ParkedReason(parked_reason)]
    if dispatched:
        return RowState.PUBLISHED
    return RowState.HELD if due else RowState.UNSENT


_PARKED_STATE: dict[ParkedReason, RowState] = {
    ParkedReason.QUEUED: RowState.QUEUED,
    ParkedReason.AWAITING_EARLIER: RowState.AWAITING_EARLIER,
    ParkedReason.ENDPOINT_GONE: RowState.PARKED,
}


def matches(state: RowState, *, done: bool, parked_reason: str | None, dispatched: bool, due: bool) -> bool:
    """Do these columns fit ``state``'s signature, what a move into it writes? (:func:`state_of`
    reads every combination that fits a signature back as that state, dead and done apart:
    ``tests/unit/test_outbox_states.py``.)"""
    signature = SIGNATURES[state]
    return (
        signature.done == done
        and (signature.parked_reason == ANY_REASON or signature.parked_reason == parked_reason)
        and signature.dispatched in (ANY, dispatched)
        and signature.due in (ANY, due)
    )
