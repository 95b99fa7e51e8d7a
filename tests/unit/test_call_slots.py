"""The per-process share of call threads each vendor may hold (workers.call_slots)."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from workers.call_slots import CallSlots


def test_a_vendor_gets_its_limit_and_no_more_and_another_vendor_is_not_counted_against_it():
    slots = CallSlots()
    assert [slots.take("slow", 2) for _ in range(3)] == [True, True, False]
    assert slots.take("fast", 2)  # the slow vendor's calls hold its own share only
    slots.give_back("slow")
    assert slots.running("slow") == 1 and slots.take("slow", 2)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.booleans()), max_size=60), st.integers(1, 4))
def test_running_never_exceeds_the_limit_and_counts_what_was_taken(steps, limit):
    slots, held = CallSlots(), {"a": 0, "b": 0}
    for provider, take in steps:
        if take:
            if slots.take(provider, limit):
                held[provider] += 1
        elif held[provider]:
            slots.give_back(provider)
            held[provider] -= 1
        assert slots.running(provider) == held[provider] <= limit


def test_threads_racing_for_slots_never_hold_more_than_the_limit():
    slots, limit, most, lock = CallSlots(), 3, [0], threading.Lock()
    start = threading.Barrier(12)

    def call() -> None:
        start.wait()
        for _ in range(200):
            if slots.take("v", limit):
                with lock:
                    most[0] = max(most[0], slots.running("v"))
                slots.give_back("v")

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] <= limit and slots.running("v") == 0
