"""Polling schedules, as plain rules (``LIAISON_PROVIDER_<NAME>_POLL_SCHEDULE_S``). Pure: no I/O.

A job is asked about after each delay of the schedule in turn, then after the last one again and
again, each delay with bounded proportional jitter (the retry policy's scheme,
``core.retry_policy``: never 0, never more than ``1 + jitter`` times the nominal), so the polls of
jobs submitted together spread out instead of arriving at the vendor in step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

#: how far a poll's delay may stray from the schedule's, either way
POLL_JITTER = 0.1


def nominal_poll_delay(schedule: Sequence[float], polls_made: int) -> float:
    """The schedule's delay before poll number ``polls_made + 1``: its entries in turn, the last repeated."""
    if not schedule:
        raise ValueError("an empty schedule polls nothing")
    if polls_made < 0:
        raise ValueError("polls_made starts at 0")
    return schedule[min(polls_made, len(schedule) - 1)]


def poll_delay(schedule: Sequence[float], polls_made: int, rng: random.Random, jitter: float = POLL_JITTER) -> float:
    """:func:`nominal_poll_delay`, jittered within ``[1 - jitter, 1 + jitter]`` of it."""
    if not 0 <= jitter < 1:
        raise ValueError("jitter must be in [0, 1)")
    return nominal_poll_delay(schedule, polls_made) * rng.uniform(1 - jitter, 1 + jitter)
