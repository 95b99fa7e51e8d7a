"""The ordering rule and the sequence numbering (core/ordering.py), over arrival orders.

A small model of the relay workers drives the pure rule: each relay of a task is a message that
comes back in an order hypothesis picks; it waits when :func:`held_by` names an earlier relay,
otherwise it is attempted, and fails a drawn number of times before it is delivered or
dead-lettered. Whatever the order, the domain app must see each task's callbacks in sequence order,
and every callback that can be delivered must be.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.ordering import (
    PendingProgress,
    Relay,
    RelayStatus,
    coalesces_into,
    held_by,
    may_deliver,
    next_sequence,
    skipped,
)


@dataclass
class Message:
    task: str
    sequence: int
    failures: int  # attempts that fail before the last one
    dead: bool  # the last attempt fails too: dead-lettered
    status: RelayStatus = RelayStatus.PENDING


def _numbered(fates: list[tuple[int, bool]], task: str = "t") -> list[Message]:
    """Sequences as the service gives them: the counter starts at 0 and each relay takes the next."""
    messages, last = [], 0
    for failures, dead in fates:
        last = next_sequence(last)
        messages.append(Message(task, last, failures, dead))
    return messages


def _view(messages: list[Message], task: str) -> list[Relay]:
    return [Relay(m.sequence, m.status) for m in messages if m.task == task]


def _settled(m: Message) -> bool:
    return m.status not in (RelayStatus.PENDING, RelayStatus.WAITING)


def _step(messages: list[Message], m: Message, delivered: list[tuple[str, int]], gaps: list[tuple[str, int]]) -> None:
    if _settled(m):
        return
    others = [r for r in _view(messages, m.task) if r.sequence != m.sequence]
    if held_by(m.sequence, others) is not None:
        m.status = RelayStatus.WAITING
        return
    if m.failures:
        m.failures -= 1
        m.status = RelayStatus.PENDING
        return
    if m.dead:
        m.status = RelayStatus.DEAD_LETTERED
        return
    gaps.extend((m.task, s) for s in skipped(m.sequence, others))
    m.status = RelayStatus.DELIVERED
    delivered.append((m.task, m.sequence))


def _run(messages: list[Message], order: list[int]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Play ``order`` (indices of messages coming back), then let every message come back in turn
    until all are settled (a release or the sweep always brings a waiting relay back)."""
    delivered: list[tuple[str, int]] = []
    gaps: list[tuple[str, int]] = []
    for index in order:
        _step(messages, messages[index % len(messages)], delivered, gaps)
    for _ in range(sum(m.failures for m in messages) + len(messages) + 1):
        if all(_settled(m) for m in messages):
            break
        for m in messages:
            _step(messages, m, delivered, gaps)
    return delivered, gaps


fates = st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=6)


@given(fates, st.lists(st.integers(0, 50), max_size=60))
def test_callbacks_arrive_in_sequence_order_whatever_order_the_messages_come_back(
    task_fates: list[tuple[int, bool]], order: list[int]
) -> None:
    messages = _numbered(task_fates)
    delivered, gaps = _run(messages, order)
    sequences = [s for _, s in delivered]
    assert sequences == sorted(sequences)
    assert all(_settled(m) for m in messages), "a relay that can go must not wait forever"
    assert sequences == [m.sequence for m in messages if not m.dead]  # every deliverable one, each once
    dead = {m.sequence for m in messages if m.dead}
    later_delivered = {s for s in dead if any(d > s for d in sequences)}
    assert {s for _, s in gaps} == later_delivered  # a gap is recorded exactly where one was passed


@given(fates, fates, st.lists(st.integers(0, 50), max_size=60))
def test_one_tasks_stuck_callback_never_delays_another_tasks(
    a_fates: list[tuple[int, bool]], b_fates: list[tuple[int, bool]], order: list[int]
) -> None:
    stuck = _numbered([(10**9, False), *a_fates], task="a")  # a's first callback retries for ever
    others = _numbered(b_fates, task="b")
    messages = stuck + others
    delivered: list[tuple[str, int]] = []
    gaps: list[tuple[str, int]] = []
    for index in order:
        _step(messages, messages[index % len(messages)], delivered, gaps)
    for _ in range(sum(m.failures for m in others) + len(others) + 1):
        for m in others:
            _step(messages, m, delivered, gaps)
    assert [s for t, s in delivered if t == "b"] == [m.sequence for m in others if not m.dead]
    assert [s for t, s in delivered if t == "a"] == []  # a's later callbacks wait behind its first


def test_the_latest_earlier_holding_relay_is_the_one_waited_for() -> None:
    relays = [
        Relay(1, RelayStatus.PENDING),
        Relay(2, RelayStatus.DEAD_LETTERED),
        Relay(3, RelayStatus.WAITING),
        Relay(5, RelayStatus.PENDING),
    ]
    assert held_by(4, relays) == 3
    assert held_by(1, relays) is None
    assert held_by(6, relays) == 5
    assert may_deliver(2, [Relay(1, RelayStatus.PARKED), Relay(3, RelayStatus.PENDING)])
    assert skipped(4, relays) == [2]


@pytest.mark.parametrize("status", [RelayStatus.DELIVERED, RelayStatus.DEAD_LETTERED, RelayStatus.PARKED])
def test_settled_relays_hold_nothing(status: RelayStatus) -> None:
    assert may_deliver(2, [Relay(1, status)])


@given(st.integers(0, 10**6))
def test_sequences_start_at_one_and_step_by_one(last: int) -> None:
    assert next_sequence(0) == 1
    assert next_sequence(last) == last + 1


def test_a_negative_counter_is_a_bug() -> None:
    with pytest.raises(ValueError):
        next_sequence(-1)


@given(st.integers(1, 50), st.integers(1, 50), st.booleans(), st.booleans())
def test_progress_coalesces_only_into_the_latest_relay_never_sent(
    sequence: int, last: int, attempted: bool, done: bool
) -> None:
    pending = PendingProgress(sequence, attempted=attempted, done=done)
    assert coalesces_into(pending, last) == (sequence == last and not attempted and not done)
    assert not coalesces_into(None, last)
