"""Pure: retry policy as data and the one function that says when to try again.

Jitter scheme: **bounded proportional jitter** — the nominal delay (exponential, or an explicit
schedule) is multiplied by a uniform factor in ``[1 - jitter, 1 + jitter]`` and then capped. Unlike
Celery's full jitter it can never retry at 0 s; the bounds are tested with hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # attempts in all, the first included
    base_s: float = 2.0
    factor: float = 2.0
    cap_s: float = 300.0  # no computed delay is longer than this
    max_total_s: float = 24 * 3600.0  # give up once the next attempt would start after this
    jitter: float = 0.2
    schedule: tuple[float, ...] = ()  # explicit nominal delays before attempts 2, 3, …

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_s < 0 or self.cap_s < 0 or self.factor < 1:
            raise ValueError("retry policy needs max_attempts>=1, base_s>=0, cap_s>=0, factor>=1")
        if any(d < 0 for d in self.schedule):
            raise ValueError("schedule delays must not be negative")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def nominal_delay(self, failed_attempts: int) -> float:
        """The un-jittered delay after ``failed_attempts`` failures (1-based)."""
        if self.schedule:
            index = min(failed_attempts - 1, len(self.schedule) - 1)
            return min(self.cap_s, self.schedule[index])
        try:
            return min(self.cap_s, self.base_s * self.factor ** (failed_attempts - 1))
        except OverflowError:  # far past the cap long before float overflow
            return self.cap_s


def next_delay(
    failed_attempts: int,
    policy: RetryPolicy,
    rng: Random,
    *,
    elapsed_s: float = 0.0,
    retry_after_s: float | None = None,
    deadline_in_s: float | None = None,
) -> float | None:
    """Seconds to wait before the next attempt, or None to give up.

    ``Retry-After`` is honoured within the cap (docs/design.md §6): never undercut, and a server asking for
    a longer wait than ``cap_s`` allows is not retried at all (waiting less would ignore it, waiting
    longer would break the cap), so the work is dead-lettered for a person to replay. It counts
    against ``max_total_s`` and the deadline like any other wait. A retry that would start after
    the task's deadline is not scheduled either: the caller escalates.
    """
    if failed_attempts < 1:
        raise ValueError("failed_attempts starts at 1")
    if failed_attempts >= policy.max_attempts:
        return None
    nominal = policy.nominal_delay(failed_attempts)
    delay = min(policy.cap_s, nominal * rng.uniform(1 - policy.jitter, 1 + policy.jitter))
    if retry_after_s is not None:
        if retry_after_s > policy.cap_s:
            return None
        delay = max(delay, retry_after_s)
    if elapsed_s + delay > policy.max_total_s:
        return None
    if deadline_in_s is not None and delay >= deadline_in_s:
        return None
    return delay


def retry_after_past_cap(policy: RetryPolicy, retry_after_s: float | None) -> bool:
    """Why ``next_delay`` gave up, for the dead letter's error: the server asked for too long a wait."""
    return retry_after_s is not None and retry_after_s > policy.cap_s
