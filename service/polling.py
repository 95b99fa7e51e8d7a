"""Polling (``LIAISON_PROVIDER_<NAME>_POLL_SCHEDULE_S``, docs/design.md §5): each open job of a
polled provider carries when the vendor is next asked about it (``poll_due_at``, on the partial
index ``ix_external_tasks_poll_due``); the poll job claims the due ones and writes a status check
for each (``service.checks``: the ``status`` call on the calls queue, through the provider's rate
limit, its answer applied through the webhook's path).

A run claims, per provider, at most ``cap`` tasks, fairly across clients: each client's due tasks
are ranked oldest due first, and the run takes every client's first before anyone's second
(round-robin), so one client's thousand open jobs do not starve another's one. Claims follow the
beat rules (``service.lifecycle``): ``FOR NO KEY UPDATE SKIP LOCKED`` on PostgreSQL, the
transaction's ``BEGIN IMMEDIATE`` on SQLite. A task whose check is still pending is not claimed: it
stays due, and the run after the check is done asks again (a ``confirm`` hint that came while a
check was in flight relies on that: ``service.checks.hint``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from core.polling import poll_delay
from models.store import store_of
from models.task import ExternalTask
from service.checks import HINT, POLL, request_check

_rng = random.SystemRandom()


def arm(task: ExternalTask, schedule: Sequence[float] | None, now: datetime, rng: random.Random = _rng) -> None:
    """The first poll of a job the vendor just took (the submit's answer), when its provider polls."""
    if schedule:
        task.poll_due_at = now + timedelta(seconds=poll_delay(schedule, 0, rng))


def claim_due(
    session: Session,
    provider: str,
    schedule: Sequence[float] | None,
    now: datetime,
    cap: int,
    rng: random.Random = _rng,
) -> list[ExternalTask]:
    """Claim up to ``cap`` due tasks of ``provider`` and write a check for each; each task's next
    poll is moved along the schedule (none without one: a ``confirm`` hint's follow-up is a one-off)."""
    tasks = store_of(session).vendor_jobs.claim_due_polls(session, provider, now, cap)
    claimed = []
    for task in tasks:  # checks written in the fair order too
        polled = bool(schedule)
        if request_check(session, task, POLL if polled else HINT, now) is None:  # one came meanwhile
            continue
        if schedule:
            task.poll_due_at = now + timedelta(seconds=poll_delay(schedule, task.polls + 1, rng))
            task.polls += 1
        else:
            task.poll_due_at = None
        claimed.append(task)
    return claimed
