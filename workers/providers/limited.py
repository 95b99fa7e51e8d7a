"""Every call to a provider -- submit, cancel, status, find -- takes a slot of the provider's shared
rate limit first (``LIAISON_PROVIDER_<NAME>_RATE_LIMIT_PER_S`` / ``_BURST``), whichever process
makes it. A slot up to ``max_wait_s`` away is waited for here; a later one raises ``RateLimited``
(nothing was sent): Celery tasks retry it after ``retry_after_s`` without counting an attempt
(``workers.tasks.outcomes.wait_for_slot``), reconcile sleeps and asks again.

With the database storage, an outbox task takes its call's slot in its start transaction
(:meth:`RateLimitedProvider.take_in`), which commits anyway, rather than in a transaction of its
own: the call then goes through :meth:`RateLimitedProvider.prepaid`, whose first call uses that
slot."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from core.rate_limit import Decision, Limit
from runtime.limiter import Limiter, RateLimited
from runtime.provider import JobSnapshot, Provider, SubmitJob


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
        self.sleep = sleep

    def _slot(self) -> None:
        key = provider_key(self.name)
        decision = self.limiter.acquire(key, self.limit, max_wait_s=self.max_wait_s)
        if not decision.allowed:
            raise RateLimited(key, decision.retry_after_s)
        if decision.wait_s > 0:
            self.sleep(decision.wait_s)

    def take_in(self, session: Session) -> Decision | None:
        """A slot for the next call, in ``session``'s transaction, when the limiter's storage is
        that database (None otherwise: the call takes its slot itself). Refused, it raises
        ``RateLimited`` for the caller to roll back. The ``rate_limits`` row stays locked until the
        caller's commit, so the caller takes it last."""
        key = provider_key(self.name)
        decision = self.limiter.acquire_with(session, key, self.limit, max_wait_s=self.max_wait_s)
        if decision is None:
            return None
        if not decision.allowed:
            raise RateLimited(key, decision.retry_after_s)
        return decision

    def prepaid(self, decision: Decision) -> Provider:
        """This provider, its next call's slot already taken (:meth:`take_in`)."""
        return PrepaidProvider(self, decision.wait_s)

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


class PrepaidProvider:
    """A :class:`RateLimitedProvider` for one delivery whose first call's slot was taken before:
    that call waits out the slot's wait and goes straight to the vendor; any later one (a submit's
    ``find`` after an uncertain answer) takes a slot of its own."""

    def __init__(self, limited: RateLimitedProvider, wait_s: float) -> None:
        self.name = limited.name
        self._limited = limited
        self._wait_s: float | None = wait_s  # None once the slot is used

    def _next(self) -> Provider:
        if self._wait_s is None:
            return self._limited
        wait_s, self._wait_s = self._wait_s, None
        if wait_s > 0:
            self._limited.sleep(wait_s)
        return self._limited.inner

    def submit(self, job: SubmitJob) -> str:
        return self._next().submit(job)

    def cancel(self, job_id: str) -> None:
        self._next().cancel(job_id)

    def status(self, job_id: str) -> JobSnapshot:
        return self._next().status(job_id)

    def find(self, correlation_id: str) -> str | None:
        return self._next().find(correlation_id)
