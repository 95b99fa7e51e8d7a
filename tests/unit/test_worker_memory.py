"""A worker child collects the cycles a retried or failed task leaves, at most once a second, and
only once it has frozen its start-up objects (app/worker_memory.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from celery import states
from celery.signals import task_postrun, worker_process_init, worker_ready

from app import worker_memory
from app.worker_memory import Collector


class Cycle:
    """What a failed task leaves: objects that refer to each other (a traceback and its frames)."""

    def __init__(self) -> None:
        self.me = self
        self.payload = bytearray(1024)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Only the collector may free a cycle while the test looks."""
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def leave_cycle() -> weakref.ref[Cycle]:
    return weakref.ref(Cycle())


@pytest.mark.parametrize("state", [states.RETRY, states.FAILURE])
def test_a_retried_or_failed_task_frees_the_cycles_left_behind(no_automatic_collection: None, state: str) -> None:
    collector = Collector(clock=Clock())
    collector.freeze()
    left = leave_cycle()
    assert left() is not None  # reference counting alone cannot free it
    assert collector.after_task(state)
    assert left() is None


def test_a_successful_task_costs_no_collection(no_automatic_collection: None) -> None:
    collector = Collector(clock=Clock())
    collector.freeze()
    left = leave_cycle()
    assert not collector.after_task(states.SUCCESS)
    assert not collector.after_task(None)
    assert left() is not None


def test_at_most_one_collection_per_interval(no_automatic_collection: None) -> None:
    clock = Clock()
    collector = Collector(min_interval_s=1.0, clock=clock)
    collector.freeze()
    assert collector.after_task(states.RETRY)
    left = leave_cycle()
    clock.now += 0.5
    assert not collector.after_task(states.RETRY)  # an outage failing every task: not one per task
    assert left() is not None
    clock.now += 0.5
    assert collector.after_task(states.RETRY)
    assert left() is None


def test_a_process_that_froze_nothing_keeps_pythons_own_schedule(no_automatic_collection: None) -> None:
    """A solo or threads pool never forks a child: a collection there would scan every object."""
    collector = Collector(clock=Clock())
    left = leave_cycle()
    assert not collector.after_task(states.RETRY)
    assert left() is not None


def test_freezing_moves_the_start_up_objects_out_of_every_collection(no_automatic_collection: None) -> None:
    collector = Collector()
    collector.freeze()
    assert gc.get_freeze_count() > 0


def test_the_receivers_are_connected_once_for_prefork_children_and_threads_workers() -> None:
    worker_memory.connect()
    worker_memory.connect()
    uids = [key[0] for key, _ in task_postrun.receivers] + [key[0] for key, _ in worker_process_init.receivers]
    assert uids.count("liaison.worker_memory.collect") == 1
    assert uids.count("liaison.worker_memory.freeze") == 1
    # a threads pool (the calls and relay lines) runs its tasks in the command's main process
    assert [key[0] for key, _ in worker_ready.receivers].count("liaison.worker_memory.freeze_ready") == 1
