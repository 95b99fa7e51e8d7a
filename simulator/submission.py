"""Taking a job, whichever vendor is played: the knobs, the outage, idempotency, failures first.

Each personality's view reads its own request shape and renders its own answers; the decision of
what happens to a submit is this one function, so every knob behaves alike under every vendor.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.behaviour import BehaviourError, resolve_behaviour
from simulator.runtime import Runtime
from simulator.store import Job, new_job

#: Why a submit was refused (the personality picks its vendor's words for each).
INVALID_KNOBS, DOWN, REJECTED, TRANSIENT = "invalid_knobs", "down", "rejected", "transient"


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str  # one of the constants above
    detail: str
    errors: list[str] = field(default_factory=list)
    retry_after: int | None = None


@dataclass(frozen=True)
class Taken:
    job: Job  # as it was when taken: the answer (a ``slow_s`` sleep does not change it)
    created: bool


def submit(
    rt: Runtime,
    key: str | None,
    reference: str,
    job_input: Any,
    callback_url: str,
    traceparent: str | None,
    baggage: str | None,
    job_id: Callable[[], str] | None = None,
) -> Refusal | Taken:
    """Create a job once per ``key`` (``None``: a vendor without idempotency keys, a new job each
    time), unless the outage or a knob says to fail first. Sleeps ``slow_s`` after creating it."""
    config = rt.store.config
    try:
        behaviour = resolve_behaviour(config, job_input)
    except BehaviourError as exc:
        return Refusal(400, INVALID_KNOBS, str(exc), exc.errors)
    key = key or "unkeyed-" + uuid.uuid4().hex
    attempt = rt.store.count_attempt(key)
    if config.down:
        return Refusal(config.down_status, DOWN, "simulated outage (down)")
    existing = rt.store.job_for_key(key)
    if existing is None:
        if behaviour.reject:
            return Refusal(422, REJECTED, "simulated permanent rejection (reject)")
        if attempt <= behaviour.transient_failures:
            detail = f"simulated transient failure {attempt} of {behaviour.transient_failures}"
            return Refusal(behaviour.transient_status, TRANSIENT, detail, retry_after=behaviour.retry_after)
    if existing is not None:
        job, created = existing, False
    else:
        fresh = new_job(
            key,
            reference,
            job_input,
            callback_url,
            behaviour,
            job_id=job_id() if job_id else None,
            traceparent=traceparent,
            baggage=baggage,
        )
        job, created = rt.store.add_or_get(fresh)
    if created:
        rt.engine.start(job)
    if behaviour.slow_s:
        time.sleep(behaviour.slow_s)  # after creation: a client that timed out can find the job
    return Taken(job, created)
