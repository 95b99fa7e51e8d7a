"""Every call to a provider -- submit, cancel, status, find -- takes a slot of the provider's shared
rate limit first (``LIAISON_PROVIDER_<NAME>_RATE_LIMIT_PER_S`` / ``_BURST``), whichever process
makes it. A slot up to ``max_wait_s`` away is waited for here; a later one raises ``RateLimited``
(nothing was sent): Celery tasks retry it after ``retry_after_s`` without counting an attempt
(``workers.tasks.outcomes.wait_for_slot``), reconcile sleeps and asks again."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.rate_limit import Limit
from workers.limiter import Limiter, RateLimited
from workers.providers.base import JobSnapshot, Provider, SubmitJob


def provider_key(name: str) -> str:
    return f"provider:{name}"


class RateLimitedProvider:
    def __init__(
        self,
        inner: Provider,
        limiter: Limiter,
        limit: Limit,
        *,
        max_wait_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.limiter = limiter
        self.limit = limit
        self.max_wait_s = max_wait_s
        self._sleep = sleep

    def _slot(self) -> None:
        key = provider_key(self.name)
        decision = self.limiter.acquire(key, self.limit, max_wait_s=self.max_wait_s)
        if not decision.allowed:
            raise RateLimited(key, decision.retry_after_s)
        if decision.wait_s > 0:
            self._sleep(decision.wait_s)

    def submit(self, job: SubmitJob) -> str:
        self._slot()
        return self.inner.submit(job)

    def cancel(self, job_id: str) -> None:
        self._slot()
        self.inner.cancel(job_id)

    def status(self, job_id: str) -> JobSnapshot:
        self._slot()
        return self.inner.status(job_id)

    def find(self, correlation_id: str) -> str | None:
        self._slot()
        return self.inner.find(correlation_id)
