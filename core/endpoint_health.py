"""Pure: the health of one callback endpoint (a client's callback origin) as a circuit breaker.

A domain app whose endpoint times out or fails should cost Liaison a few sockets and then nothing:
after ``failures_to_pause`` failed deliveries in a row the endpoint is *paused* — its relays wait in
the outbox without calling it — for a back-off that doubles with every pause that follows
(``pause_s``, ``2 × pause_s``, … up to ``pause_cap_s``). When a pause runs out, one delivery is let
through as the *probe* (and the others keep waiting while it runs, for at most ``probe_s``); if it
succeeds the endpoint is healthy again and its relays resume by themselves, if it fails the next,
longer pause begins. A success at any time resets everything: failures must be consecutive.

Failures of deliveries that started before the pause (they were already in the endpoint's sockets)
are counted but do not lengthen the pause: only a failed probe does. 410 Gone is not this module's
business: it disables the URL for good until a person enables it (``service.dead_letters``).
Standard library only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta


@dataclass(frozen=True)
class HealthPolicy:
    failures_to_pause: int = 5
    pause_s: float = 30.0
    pause_cap_s: float = 900.0
    probe_s: float = 45.0  # a probe in flight holds the others back this long at most (its worker may die)

    def __post_init__(self) -> None:
        if self.failures_to_pause < 1 or self.pause_s <= 0 or self.pause_cap_s < self.pause_s or self.probe_s <= 0:
            raise ValueError("health policy needs failures_to_pause>=1, 0<pause_s<=pause_cap_s, probe_s>0")

    def pause_for(self, pauses: int) -> float:
        """The length of the ``pauses``-th pause in a row (1-based): doubling, capped."""
        if pauses >= 64:  # 2**64 × any positive pause is past every cap
            return self.pause_cap_s
        return min(self.pause_cap_s, self.pause_s * 2 ** (pauses - 1))


@dataclass(frozen=True)
class Health:
    """What is remembered of one endpoint. The default is a healthy endpoint (no row is stored)."""

    failures: int = 0  # failed deliveries in a row
    pauses: int = 0  # pauses in a row, the current one included: the back-off's exponent
    paused_until: datetime | None = None  # set while paused (and after, until a probe succeeds)
    probe_until: datetime | None = None  # a probe is in flight until then

    @property
    def healthy(self) -> bool:
        return self.failures == 0 and self.paused_until is None

    def paused_at(self, now: datetime) -> bool:
        """Relays must wait (a pause, or a probe in flight)."""
        return self.paused_until is not None and (
            self.paused_until > now or (self.probe_until is not None and self.probe_until > now)
        )


class Verdict(enum.Enum):
    GO = "go"  # deliver
    PROBE = "probe"  # deliver, as the one probe of a pause that ran out
    WAIT = "wait"  # do not call; come back at ``Admission.until``


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    health: Health  # what to store (changed only by a PROBE)
    until: datetime | None = None  # WAIT: when to come back


def admit(health: Health, now: datetime, policy: HealthPolicy) -> Admission:
    """May a delivery to this endpoint start now?"""
    if health.paused_until is None:
        return Admission(Verdict.GO, health)
    if health.paused_until > now:
        return Admission(Verdict.WAIT, health, health.paused_until)
    if health.probe_until is not None and health.probe_until > now:
        return Admission(Verdict.WAIT, health, health.probe_until)
    probing = replace(health, probe_until=now + timedelta(seconds=policy.probe_s))
    return Admission(Verdict.PROBE, probing)


def after_failure(health: Health, now: datetime, policy: HealthPolicy) -> Health:
    """A delivery failed (a timeout, a refused connection, an answer other than 2xx or 410)."""
    failures = health.failures + 1
    probe_failed = health.probe_until is not None and (health.paused_until is None or health.paused_until <= now)
    if health.paused_until is not None and not probe_failed:
        # paused already: a delivery that was in flight when the pause began; the pause stands
        return replace(health, failures=failures)
    if failures < policy.failures_to_pause and not probe_failed:
        return replace(health, failures=failures)
    pauses = health.pauses + 1
    until = now + timedelta(seconds=policy.pause_for(pauses))
    return Health(failures=failures, pauses=pauses, paused_until=until, probe_until=None)


def after_success(health: Health) -> Health:
    """A delivery succeeded: the endpoint answers; whatever waited for it may go."""
    return Health()
