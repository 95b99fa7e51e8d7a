"""One of several OS processes calling a provider through its shared rate limit (test_limits.py).

    python -m tests.integration.limiter_process STORAGE URL NAMESPACE RATE BURST CALLS START_AT OUT

NAMESPACE keeps this run's key apart from everything else. STORAGE is ``redis`` or ``database``
(URL is then the Redis or the database URL). The process waits
until the wall clock reaches START_AT (so its peers start together), then makes CALLS ``status``
calls through ``RateLimitedProvider`` -- the class every worker uses -- with a refused slot retried
after its ``retry_after_s``, as a worker's retry would. It writes one JSON line to OUT: the wall-clock
instants the limiter granted (the ``now`` it decided at: ``max_wait_s`` is 0, so a granted call goes
at once) and how many refusals it saw.
"""

from __future__ import annotations

import json
import sys
import time

from core.rate_limit import Limit
from models.db import Database
from runtime.limiter import DatabaseLimiter, Limiter, RateLimited, RedisLimiter
from runtime.provider import JobSnapshot, SubmitJob
from workers.providers.limited import RateLimitedProvider


class RecordingClock:
    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self) -> float:
        self.last = time.time()
        return self.last


class Vendor:
    """Stands in for the vendor: records when each call was let through (the limiter's instant)."""

    name = "sim"

    def __init__(self, clock: RecordingClock, name: str) -> None:
        self.name = name  # the limiter key is provider:<name>: a fresh one per test run
        self.clock = clock
        self.granted: list[float] = []

    def status(self, job_id: str) -> JobSnapshot:
        self.granted.append(self.clock.last)
        return JobSnapshot(job_id, "running")

    def submit(self, job: SubmitJob) -> str:  # pragma: no cover - the protocol's other calls
        raise NotImplementedError

    def cancel(self, job_id: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def find(self, correlation_id: str) -> str | None:  # pragma: no cover
        raise NotImplementedError


def main(argv: list[str]) -> None:
    storage, url, namespace, rate, burst, calls, start_at, out = argv
    clock = RecordingClock()
    limiter: Limiter
    if storage == "redis":
        limiter = RedisLimiter(url, prefix=f"liaison:rate:{namespace}:", clock=clock)
    else:
        limiter = DatabaseLimiter(Database(url), clock=clock)
    vendor = Vendor(clock, f"sim-{namespace}")
    provider = RateLimitedProvider(vendor, limiter, Limit(float(rate), int(burst)), max_wait_s=0.0)
    refused = 0
    time.sleep(max(float(start_at) - time.time(), 0.0))
    while len(vendor.granted) < int(calls):
        try:
            provider.status("job-1")
        except RateLimited as exc:
            refused += 1
            time.sleep(exc.retry_after_s)
    with open(out, "w") as fh:
        json.dump({"granted": vendor.granted, "refused": refused}, fh)


if __name__ == "__main__":
    main(sys.argv[1:])
