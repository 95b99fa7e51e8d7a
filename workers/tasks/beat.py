"""Beat jobs: thin wrappers over idempotent, lease-safe functions (safe when two beats run)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TypeVar

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from models.base import utcnow
from models.orphans import flag_stale_orphans
from models.retention import prune_processed_messages as prune
from workers.deadlines import check_deadlines as run_check_deadlines
from workers.reconcile import reconcile as run_reconcile
from workers.runtime import liaison

log = logging.getLogger(__name__)
R = TypeVar("R")


def stops_at_soft_limit(job: Callable[[], R]) -> Callable[[], R | None]:
    """A beat job cut off by its soft time limit ends quietly: its transactions committed what they
    did, claims and leases expire, and the next run carries on from where this one stopped."""

    @functools.wraps(job)
    def run() -> R | None:
        try:
            return job()
        except SoftTimeLimitExceeded:
            log.warning("beat job %s stopped at its soft time limit; the next run carries on", job.__name__)
            return None

    return run


@shared_task(name="liaison.sweep_outbox")
@stops_at_soft_limit
def sweep_outbox() -> int:
    ctx = liaison()
    settings = ctx.settings
    published = ctx.publisher.sweep(utcnow(), settings.outbox_grace_s, settings.outbox_lease_s, settings.beat_batch)
    if published:
        log.info("outbox sweep published %d rows", published)
    return published


@shared_task(name="liaison.prune_processed_messages")
@stops_at_soft_limit
def prune_processed_messages() -> int:
    ctx = liaison()
    removed = prune(ctx.db, utcnow(), ctx.settings.processed_retention_s)
    log.info("pruned %d processed messages", removed)
    return removed


@shared_task(name="liaison.check_deadlines")
@stops_at_soft_limit
def check_deadlines() -> int:
    escalated = run_check_deadlines(liaison(), utcnow())
    if escalated:
        log.info("%d deadlines or heartbeats came due", escalated)
    return escalated


@shared_task(name="liaison.reconcile")
@stops_at_soft_limit
def reconcile() -> dict[str, object]:
    report = run_reconcile(liaison(), utcnow())
    log.info("reconciled: %s", report)
    return dataclasses.asdict(report)


@shared_task(name="liaison.flag_stale_orphans")
@stops_at_soft_limit
def flag_stale_orphans_task() -> int:
    ctx = liaison()
    with ctx.db.transaction() as session:
        flagged = flag_stale_orphans(session, utcnow(), ctx.settings.orphan_window_s, ctx.settings.beat_batch)
    return flagged
