"""Thread-safe in-memory state of the simulator: jobs, submit attempts, deliveries, config.

Request threads and timer threads touch the same jobs, so every read and write goes through one
lock and jobs are immutable snapshots (a state change replaces the snapshot). Check-and-set
operations (create-or-get by Idempotency-Key, status transitions) are single locked steps so two
racing requests can never create two jobs or both "win" a cancel.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from simulator.behaviour import EVENT_TYPES, Behaviour, GlobalConfig

ACTIVE_STATUSES = frozenset({"queued", "running"})
#: GitHub-style numeric job ids: increasing, from a random start, so two simulators rarely agree.
_NUMERIC_IDS = itertools.count(10**9 + secrets.randbelow(10**9))


def numeric_job_id() -> str:
    """A GitHub-style job id (an integer, kept as its decimal text like every other job id)."""
    return str(next(_NUMERIC_IDS))


@dataclass(frozen=True)
class Job:
    job_id: str
    idempotency_key: str
    reference: str
    input: Any
    callback_url: str
    behaviour: Behaviour
    #: one stable webhook-id per event type, reused for duplicates and re-sends
    webhook_ids: Mapping[str, str]
    status: str = "queued"
    outcome: Any = None
    created_at: float = field(default_factory=time.time)
    accepted_at: float | None = None
    finished_at: float | None = None
    #: the last ``progress`` percentage reported (the stripe and github objects show it)
    progress: float | None = None
    #: the W3C ``traceparent`` header the job was created with, as received (tests check the trace)
    traceparent: str | None = None
    #: the W3C ``baggage`` header it was created with, as received: what a caller leaked (issue 44)
    baggage: str | None = None

    def public(self) -> dict[str, Any]:
        """The provider-contract shape of ``GET /jobs/<id>``."""
        return {
            "job_id": self.job_id,
            "reference": self.reference,
            "status": self.status,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class Delivery:
    """One webhook POST attempt (or a deliberately dropped event, with ``attempt == 0``)."""

    job_id: str
    type: str
    webhook_id: str
    copy: int  # 1..duplicate
    attempt: int
    status: int | None  # HTTP status, None on a connection error or a drop
    error: str | None
    result: str  # delivered | retrying | gave_up | dropped | silenced | not_sent (poll-only)
    at: float = field(default_factory=time.time)


def new_job(
    idempotency_key: str,
    reference: str,
    job_input: Any,
    callback_url: str,
    behaviour: Behaviour,
    job_id: str | None = None,
    traceparent: str | None = None,
    baggage: str | None = None,
) -> Job:
    """``job_id``: over AMQP the job is named by the client's reference (there is no submit answer)."""
    return Job(
        job_id=job_id or "job_" + secrets.token_hex(8),
        idempotency_key=idempotency_key,
        reference=reference,
        input=job_input,
        callback_url=callback_url,
        behaviour=behaviour,
        webhook_ids={event: "msg_" + uuid.uuid4().hex for event in EVENT_TYPES},
        traceparent=traceparent[:128] if traceparent else None,
        baggage=baggage[:8192] if baggage else None,
    )


class Store:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._by_key: dict[str, str] = {}
        self._attempts: dict[str, int] = {}
        self._deliveries: list[Delivery] = []
        self._config = GlobalConfig()

    # config -----------------------------------------------------------------------------------
    @property
    def config(self) -> GlobalConfig:
        with self._lock:
            return self._config

    def set_config(self, config: GlobalConfig) -> None:
        with self._lock:
            self._config = config

    # jobs -------------------------------------------------------------------------------------
    def count_attempt(self, idempotency_key: str) -> int:
        """Record one ``POST /jobs`` for this key; return how many there have been, this included."""
        with self._lock:
            self._attempts[idempotency_key] = self._attempts.get(idempotency_key, 0) + 1
            return self._attempts[idempotency_key]

    def job_for_key(self, idempotency_key: str) -> Job | None:
        with self._lock:
            job_id = self._by_key.get(idempotency_key)
            return self._jobs.get(job_id) if job_id else None

    def add_or_get(self, job: Job) -> tuple[Job, bool]:
        """Insert ``job`` unless its Idempotency-Key already has one; return (job, created)."""
        with self._lock:
            existing = self._by_key.get(job.idempotency_key)
            if existing is not None:
                return self._jobs[existing], False
            self._jobs[job.job_id] = job
            self._by_key[job.idempotency_key] = job.job_id
            return job, True

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all_jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def find(self, reference: str) -> list[Job]:
        with self._lock:
            return [job for job in self._jobs.values() if job.reference == reference]

    def transition(
        self, job_id: str, allowed_from: Collection[str], status: str, **changes: Any
    ) -> tuple[Job | None, bool]:
        """Move a job to ``status`` if it is in ``allowed_from``.

        Returns ``(job, changed)``: ``(None, False)`` for an unknown job, the unchanged job and
        ``False`` when it was in another status.
        """
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status not in allowed_from:
                return job, False
            job = replace(job, status=status, **changes)
            self._jobs[job_id] = job
            return job, True

    # deliveries -------------------------------------------------------------------------------
    def record_delivery(self, delivery: Delivery) -> None:
        with self._lock:
            if delivery.job_id in self._jobs:  # a sender still running across a reset is ignored
                self._deliveries.append(delivery)

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return list(self._deliveries)

    # control ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything, JSON-ready, for ``GET /_sim/jobs``."""
        with self._lock:
            jobs = [
                {
                    **job.public(),
                    "idempotency_key": job.idempotency_key,
                    "callback_url": job.callback_url,
                    "input": job.input,
                    "webhook_ids": dict(job.webhook_ids),
                    "submit_attempts": self._attempts.get(job.idempotency_key, 0),
                    "created_at": job.created_at,
                    "accepted_at": job.accepted_at,
                    "finished_at": job.finished_at,
                    "traceparent": job.traceparent,
                    "baggage": job.baggage,
                }
                for job in self._jobs.values()
            ]
            return {
                "jobs": jobs,
                "submit_attempts": dict(self._attempts),
                "deliveries": [asdict(d) for d in self._deliveries],
                "config": self._config.as_dict(),
            }

    def reset(self) -> None:
        with self._lock:
            self._jobs.clear()
            self._by_key.clear()
            self._attempts.clear()
            self._deliveries.clear()
            self._config = GlobalConfig()
