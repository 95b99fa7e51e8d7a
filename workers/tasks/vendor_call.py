"""The outbox tasks that call a vendor (submit, cancel, probe): each takes one of its vendor's call
slots in this process before it is counted, and gives it back when the delivery ends, so a slow
vendor holds its share of the calls process's threads and no more (``workers.call_slots``)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TypeVar

from sqlalchemy.orm import Session

from foundation import metrics
from models.messages import OutboxMessage
from models.task import ExternalTask
from runtime.context import Liaison
from workers.providers import Provider, RateLimitedProvider
from workers.tasks.attempt import Attempt, ComeBackLater, OutboxTask

#: A call finding its vendor's slots taken comes back after this, plus up to as much again at random
#: (so the waiting calls do not come back together): a slot frees when one of the vendor's calls ends.
CALL_SLOT_WAIT_S = 1.0
_rng = random.SystemRandom()
X = TypeVar("X")
R = TypeVar("R")


class VendorCall(OutboxTask[tuple[Provider, X], R]):
    """An outbox task whose ``claim`` locks the task (``self.task``), so the vendor is known before
    the delivery is counted: a call that must wait for a slot leaves nothing behind but a retry.
    Its work is the provider and what to send it (``X``)."""

    task: ExternalTask | None = None  # locked with the row, at each stage
    _slot: str | None = None  # the provider whose slot this delivery holds

    def admit(self, ctx: Liaison, session: Session, row: OutboxMessage) -> str | None:
        provider = self.task.provider if self.task is not None else None
        if provider is None or provider not in ctx.settings.providers:
            return None  # prepare refuses it, no call made
        if not ctx.call_slots.take(provider, ctx.settings.call_slots(provider)):
            metrics.vendor_call_wait(provider)
            raise ComeBackLater(CALL_SLOT_WAIT_S + _rng.uniform(0.0, CALL_SLOT_WAIT_S), "call_slot_wait")
        self._slot = provider
        return None

    def release(self, ctx: Liaison) -> None:
        if self._slot is not None:
            ctx.call_slots.give_back(self._slot)
            self._slot = None

    def before_call(
        self, ctx: Liaison, session: Session, attempt: Attempt[tuple[Provider, X]]
    ) -> Attempt[tuple[Provider, X]]:
        """The call's rate slot in the start transaction, which commits it with the count (one
        commit, not two), when the limiter keeps its slots in this database; refused, it raises
        ``RateLimited``. Last in the start, so the ``rate_limits`` row is locked only for its commit."""
        provider, what = attempt.work
        if not isinstance(provider, RateLimitedProvider) or (decision := provider.take_in(session)) is None:
            return attempt
        return replace(attempt, work=(provider.prepaid(decision), what))
