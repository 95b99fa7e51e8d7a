"""A worker child frees what a retried or failed task leaves behind at once, not thousands of tasks later.

A task that ends in ``Retry`` or an exception leaves reference cycles: Celery's and billiard's
``ExceptionInfo`` hold the traceback, whose frames hold their locals. Reference counting never frees
a cycle; Python's cycle collector does, but its full collection waits until the long-lived objects
have grown by a quarter, which in a worker child that imported Flask, SQLAlchemy and Celery (about
130,000 objects) is thousands of failed tasks away. Measured on the Procfile's worker against a
vendor answering 503 (``bench/retry_memory.py``): each child grew from 99 to 235 MiB over 4,800
failed submit attempts, and ``bin/chaos`` found children at 202 MiB after the vendor flapped; with
what this module does they stay at 117–118 MiB.

A full collection of that heap costs about 140 ms on a 2-core machine, so each child first freezes
what it holds at start (``gc.freeze``, meant for processes that fork: those objects are never
scanned again), after which a collection scans only what tasks have allocated since, a fraction of
a millisecond. It runs after a task that retried or failed, at most once per ``MIN_INTERVAL_S``:
a vendor outage that fails every task pays for one small collection a second, the happy path for
none. Prefork children freeze when they are forked (``worker_process_init``); a ``celery worker``
on threads (the Procfile's ``calls`` and ``relay``, whose tasks run in the main process) freezes
when it is ready (``worker_ready``, sent by the command's worker only). The tests' in-process
workers send neither: they have frozen nothing, would pay for a whole collection, and keep Python's
own schedule.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from celery import states
from celery.signals import task_postrun, worker_process_init, worker_ready

#: The least time between two collections in one process.
MIN_INTERVAL_S = 1.0
#: Task states that leave an exception's traceback behind.
LEAVES_CYCLES = frozenset({states.RETRY, states.FAILURE})


class Collector:
    """Collects after a task that left cycles, at most once per ``min_interval_s`` (per process)."""

    def __init__(self, min_interval_s: float = MIN_INTERVAL_S, clock: Any = time.monotonic) -> None:
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.last = float("-inf")
        self.armed = False  # set once the process froze its start-up objects

    def freeze(self) -> None:
        gc.freeze()
        self.armed = True

    def after_task(self, state: str | None) -> bool:
        """True when it collected."""
        if not self.armed or state not in LEAVES_CYCLES:
            return False
        now = self.clock()
        if now - self.last < self.min_interval_s:
            return False
        self.last = now
        gc.collect()
        return True


_collector = Collector()


def connect() -> None:
    """Connect the receivers (once per process)."""
    worker_process_init.connect(_freeze, weak=False, dispatch_uid="liaison.worker_memory.freeze")
    worker_ready.connect(_freeze, weak=False, dispatch_uid="liaison.worker_memory.freeze_ready")
    task_postrun.connect(_after_task, weak=False, dispatch_uid="liaison.worker_memory.collect")


def _freeze(**_: Any) -> None:
    _collector.freeze()


def _after_task(state: str | None = None, **_: Any) -> None:
    _collector.after_task(state)
