"""Fair dispatch's rules (core.fair_share): ranks with aging, weighted shares of a vendor's capacity,
windows, concurrency keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.fair_share import Candidate, DispatchPolicy, fill, first_free, plan, rank, window_room

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_priority_ranks_a_task_later_by_one_aging_step_per_level():
    assert rank(T0, 1, 60) == T0
    assert rank(T0, 3, 60) == at(120)
    # a priority-1 task created now overtakes priority-3 work created up to two minutes ago...
    assert rank(at(119), 1, 60) < rank(T0, 3, 60)
    # ...but not work older than that: waiting long enough outranks any priority (no starvation)
    assert rank(at(241), 1, 60) > rank(T0, 5, 60)


def candidate(cid: int, *, weight: int = 1, open_jobs: int = 0, on_the_way: int = 0, waiting: int = 100) -> Candidate:
    return Candidate(cid, weight, open_jobs, on_the_way, waiting, at(cid))


def test_without_a_cap_each_client_fills_its_own_window():
    granted = plan([candidate(1, on_the_way=3), candidate(2, weight=2), candidate(3, waiting=2)], None, window=4)
    assert granted == {1: 1, 2: 8, 3: 2}


def test_a_vendors_capacity_goes_to_the_client_with_the_fewest_open_jobs_per_weight():
    busy, idle = candidate(1, open_jobs=15), candidate(2, open_jobs=0)
    assert plan([busy, idle], 1, window=8) == {1: 0, 2: 1}
    # equal shares otherwise: slots alternate, and the longest waiting goes first
    assert plan([candidate(1), candidate(2), candidate(3)], 5, window=8) == {1: 2, 2: 2, 3: 1}
    # weight 2 gets twice the open jobs
    assert plan([candidate(1, weight=2), candidate(2)], 6, window=8) == {1: 4, 2: 2}


def test_a_plan_never_passes_a_window_nor_the_waiting_tasks():
    assert plan([candidate(1, on_the_way=7, waiting=5), candidate(2, waiting=1)], 10, window=8) == {1: 1, 2: 1}


@given(
    clients=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 30), st.integers(0, 10), st.integers(0, 40)), max_size=8
    ),
    room=st.one_of(st.none(), st.integers(0, 60)),
    window=st.integers(1, 10),
)
def test_any_plan_respects_room_windows_and_fair_shares(clients, room, window):
    candidates = [
        Candidate(i, weight, open_jobs, on_the_way, waiting, at(i))
        for i, (weight, open_jobs, on_the_way, waiting) in enumerate(clients)
    ]
    granted = plan(candidates, room, window)
    assert set(granted) == {c.client_id for c in candidates}
    for c in candidates:
        assert 0 <= granted[c.client_id] <= min(c.waiting, max(0, window * c.weight - c.on_the_way))
    if room is not None:
        assert sum(granted.values()) <= room
        # no slot went to a client while another eligible one had fewer open jobs per weight after it
        for c in candidates:
            for d in candidates:
                if granted[c.client_id] and granted[d.client_id] < min(d.waiting, window * d.weight - d.on_the_way):
                    before_last = (c.open_jobs + granted[c.client_id] - 1) / c.weight
                    assert before_last <= (d.open_jobs + granted[d.client_id]) / d.weight


def test_a_concurrency_key_lets_one_task_through_and_the_others_of_the_client_pass():
    ranked = [(1, "acct-a"), (2, "acct-a"), (3, None), (4, "acct-b"), (5, "acct-a")]
    assert first_free(ranked, {}, key_limit=1, wanted=10) == [1, 3, 4]
    assert first_free(ranked, {"acct-a": 1}, key_limit=1, wanted=10) == [3, 4]
    assert first_free(ranked, {"acct-a": 1}, key_limit=2, wanted=2) == [1, 3]


@given(
    ranked=st.lists(
        st.tuples(st.integers(), st.sampled_from([None, "a", "b", "c"])), max_size=30, unique_by=lambda t: t[0]
    ),
    open_now=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
    limit=st.integers(1, 3),
    wanted=st.integers(0, 30),
)
def test_no_key_ever_passes_its_limit_and_order_is_kept(ranked, open_now, limit, wanted):
    taken = first_free(ranked, open_now, limit, wanted)
    assert len(taken) <= wanted
    assert taken == [task_id for task_id, _ in ranked if task_id in set(taken)]  # rank order kept
    keys = dict(ranked)
    for key in ("a", "b", "c"):
        released = sum(keys[t] == key for t in taken)
        assert released == 0 or open_now.get(key, 0) + released <= limit


def test_bad_policies_are_refused():
    with pytest.raises(ValueError):
        DispatchPolicy(window=0)
    with pytest.raises(ValueError):
        DispatchPolicy(caps={"sim": 0})
    assert DispatchPolicy(caps={"sim": 20}).cap("sim") == 20 and DispatchPolicy().cap("sim") is None


# --- issue 44: slots a client cannot use (its tasks all held by their keys) are handed on ---------


def test_a_client_whose_queue_is_all_held_by_its_key_hands_its_slots_to_the_next():
    """Cap 8, 5 open: X has 1 open job and 199 queued on that job's key, Y has 4 open and 36 queued.
    X has the fewest open jobs, so the plan gives it the 3 free slots; it can use none of them."""
    x, y = candidate(1, open_jobs=1, waiting=199), candidate(2, open_jobs=4, waiting=36)
    assert plan([x, y], 3, window=16) == {1: 3, 2: 0}  # what can go is not what waits
    asked: list[tuple[int, int]] = []

    def take(cid: int, n: int) -> int:
        asked.append((cid, n))
        return 0 if cid == 1 else n

    assert fill([x, y], 3, window=16, take=take) == {1: 0, 2: 3}
    assert asked == [(1, 3), (2, 3)]
    # told beforehand, the plan itself gives the slots to the client that can use them
    assert plan([replace(x, ready=0), y], 3, window=16) == {1: 0, 2: 3}


def test_a_short_client_keeps_what_it_found_and_the_rest_goes_on():
    a, b, c = candidate(1), candidate(2), candidate(3)
    ready = {1: 1, 2: 100, 3: 100}
    assert fill([a, b, c], 6, window=8, take=lambda cid, n: min(n, ready[cid])) == {1: 1, 2: 3, 3: 2}


@given(
    clients=st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 30), st.integers(0, 10), st.integers(0, 40), st.integers(0, 40)),
        max_size=8,
    ),
    room=st.one_of(st.none(), st.integers(0, 60)),
    window=st.integers(1, 10),
)
def test_no_slot_idles_while_any_client_has_a_task_that_may_go(clients, room, window):
    candidates = [
        Candidate(i, weight, open_jobs, on_the_way, waiting, at(i))
        for i, (weight, open_jobs, on_the_way, waiting, _) in enumerate(clients)
    ]
    ready = {i: min(eligible, clients[i][3]) for i, (*_, eligible) in enumerate(clients)}
    asks: list[tuple[int, int]] = []

    def take(cid: int, n: int) -> int:
        asks.append((cid, n))
        return min(n, ready[cid])

    granted = fill(candidates, room, window, take)
    can = {c.client_id: min(ready[c.client_id], window_room(c, window)) for c in candidates}
    for c in candidates:
        assert 0 <= granted[c.client_id] <= can[c.client_id]  # never more than may go
    if room is not None:
        assert sum(granted.values()) <= room
    if room is None or sum(granted.values()) < room:
        assert granted == can  # a slot left over: every client took all it could
    # fair: exactly what the plan gives when told beforehand how many of each client's tasks may go
    assert granted == plan([replace(c, ready=ready[c.client_id]) for c in candidates], room, window)
    rounds_bound = (len(candidates) + 1) * max(len(candidates), 1)
    assert len(asks) <= rounds_bound
    assert all(n > 0 for _, n in asks)
