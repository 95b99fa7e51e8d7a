"""The one adapter from our error tree onto Celery: retry with a countdown, or dead-letter.

Tasks raise or catch ``workers.errors``; this module decides, with the pure retry policy, whether
the failure is retried (``task.retry(countdown=…)``, never a sleeping worker) or dead-lettered.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from random import Random

from celery import Task

from app.extensions import Liaison
from models import service
from models.base import utcnow
from workers.errors import CallError, PermanentError
from workers.retry_policy import RetryPolicy, next_delay

log = logging.getLogger(__name__)
_rng = Random()


def retry_or_dead_letter(
    task: Task,
    ctx: Liaison,
    outbox_id: int,
    exc: CallError,
    policy: RetryPolicy,
    *,
    fault: str,
    deadline: datetime | None = None,
    retry_permanent: bool = False,
) -> str:
    """Schedule the next attempt, or write the dead letter when the policy says stop."""
    now = utcnow()
    failed_attempts = task.request.retries + 1
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        delay = None
        if retry_permanent or not isinstance(exc, PermanentError):
            delay = next_delay(
                failed_attempts, policy, _rng,
                elapsed_s=(now - row.created_at).total_seconds(),
                retry_after_s=exc.retry_after_s,
                deadline_in_s=(deadline - now).total_seconds() if deadline else None,
            )
        if delay is None:
            rows = service.dead_letter(session, row, str(exc), fault, now)
        else:
            service.record_attempt_failure(session, row, str(exc), now + timedelta(seconds=delay), now)
    if delay is None:
        log.warning("dead-lettered outbox %s after %d attempts: %s", outbox_id, failed_attempts, exc)
        ctx.publisher.publish(rows)
        return "dead_lettered"
    log.info("attempt %d of outbox %s failed, retrying in %.1fs: %s", failed_attempts, outbox_id, delay, exc)
    raise task.retry(countdown=delay, max_retries=None, exc=exc)
