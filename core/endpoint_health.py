"""Pure: the health of one callback endpoint (a client's callback origin) as a circuit breaker.

A domain app whose endpoint is *down* should cost Liaison a few sockets and then nothing: after
``failures_to_pause`` deliveries in a row found it down the endpoint is *paused* — its relays wait
in the outbox without calling it — for a back-off that doubles with every pause that follows
(``pause_s``, ``2 × pause_s``, … up to ``pause_cap_s``). When a pause runs out, one delivery is let
through as the *probe* (and the others keep waiting while it runs, for at most ``probe_s``); if it
succeeds the endpoint is healthy again and its relays resume by themselves, if it finds the
endpoint down the next, longer pause begins. A success at any time resets everything: failures must
be consecutive.

Only an endpoint that is down trips the breaker (:func:`signal_of`): a transport failure (refused,
reset, a timeout) or an overload answer (5xx, 408, 429). An answer that rejects one message (a 3xx,
any other 4xx) comes from an endpoint that is up: that message is retried or dead-lettered on its
own schedule, and the endpoint's health does not change (:func:`after_rejection`), except that a
probe which was rejected hands the probe on at once instead of holding the others for ``probe_s``
— and never lengthens the pause. The delivery whose failure paused the endpoint does not probe it
while others may (``probe_grace_s`` after the pause ran out, they have the first go): one callback
the app keeps failing cannot be the only thing that decides whether the app's others are sent.

Failures of deliveries that started before the pause (they were already in the endpoint's sockets)
are counted but do not lengthen the pause: only a failed probe does. 410 Gone is not this module's
business: it disables the URL for good until a person enables it (``service.dead_letters``).
Standard library only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from core.classify import Failure

#: Answers that say the endpoint is overloaded or timing out rather than refusing one message.
DOWN_STATUSES = frozenset({408, 429})


class Signal(enum.Enum):
    """What a failed delivery says about its endpoint."""

    DOWN = "down"  # the endpoint could not take it: counts toward a pause
    REJECTED = "rejected"  # the endpoint is up and refused this message: says nothing of the endpoint


def signal_of(status: int | None, failure: Failure | str | None = None) -> Signal:
    """A failed delivery's ``status`` (None: no answer; then ``failure`` says what went wrong).

    No answer at all — refused, reset, a connect or read timeout — and 5xx, 408 and 429 are an
    endpoint that is down or overloaded. Any other answer (3xx, 4xx, 1xx, an answer that broke the
    contract) came from an endpoint that is up. A 2xx is no failure: callers never ask."""
    if status is None:
        return Signal.REJECTED if failure is not None and Failure(failure) is Failure.BAD_RESPONSE else Signal.DOWN
    if status >= 500 or status in DOWN_STATUSES:
        return Signal.DOWN
    return Signal.REJECTED


@dataclass(frozen=True)
class HealthPolicy:
    failures_to_pause: int = 5
    pause_s: float = 30.0
    pause_cap_s: float = 900.0
    probe_s: float = 45.0  # a probe in flight holds the others back this long at most (its worker may die)
    #: after a pause runs out, this long the delivery that paused it leaves the probe to the others
    probe_grace_s: float = 5.0

    def __post_init__(self) -> None:
        if (
            self.failures_to_pause < 1
            or self.pause_s <= 0
            or self.pause_cap_s < self.pause_s
            or self.probe_s <= 0
            or self.probe_grace_s < 0
        ):
            raise ValueError(
                "health policy needs failures_to_pause>=1, 0<pause_s<=pause_cap_s, probe_s>0, probe_grace_s>=0"
            )

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
    paused_by: int | None = None  # the delivery (outbox id) whose failure began the pause: not the next probe

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


def admit(health: Health, now: datetime, policy: HealthPolicy, delivery: int | None = None) -> Admission:
    """May ``delivery`` (its outbox id) to this endpoint start now?"""
    if health.paused_until is None:
        return Admission(Verdict.GO, health)
    if health.paused_until > now:
        return Admission(Verdict.WAIT, health, health.paused_until)
    if health.probe_until is not None and health.probe_until > now:
        return Admission(Verdict.WAIT, health, health.probe_until)
    grace_ends = health.paused_until + timedelta(seconds=policy.probe_grace_s)
    if delivery is not None and delivery == health.paused_by and grace_ends > now:
        return Admission(Verdict.WAIT, health, grace_ends)  # the others first: it may be only this one failing
    probing = replace(health, probe_until=now + timedelta(seconds=policy.probe_s))
    return Admission(Verdict.PROBE, probing)


def after_failure(health: Health, now: datetime, policy: HealthPolicy, delivery: int | None = None) -> Health:
    """A delivery (its outbox id) found the endpoint down (:data:`Signal.DOWN`): a timeout, a refused
    connection, 5xx, 408, 429."""
    failures = health.failures + 1
    probe_failed = health.probe_until is not None and (health.paused_until is None or health.paused_until <= now)
    if health.paused_until is not None and not probe_failed:
        # paused already: a delivery that was in flight when the pause began; the pause stands
        return replace(health, failures=failures)
    if failures < policy.failures_to_pause and not probe_failed:
        return replace(health, failures=failures)
    pauses = health.pauses + 1
    until = now + timedelta(seconds=policy.pause_for(pauses))
    return Health(failures=failures, pauses=pauses, paused_until=until, probe_until=None, paused_by=delivery)


def after_rejection(health: Health, now: datetime, was_probe: bool) -> Health:
    """A delivery was rejected (:data:`Signal.REJECTED`): the endpoint is up, that message is
    refused. Nothing is counted; a probe that was rejected hands the probe on (the next delivery
    may probe at once) and the pause is not lengthened."""
    if was_probe and health.probe_until is not None and health.probe_until > now:
        return replace(health, probe_until=None)
    return health


def after_success(health: Health) -> Health:
    """A delivery succeeded: the endpoint answers; whatever waited for it may go."""
    return Health()
