"""Reconciliation: ask each provider about tasks that have been quiet too long, and apply what it
says through the webhook path. Provider calls happen outside any transaction, paced by the
provider's rate limit; each result is applied in its own short transaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from app.extensions import Liaison
from models.lifecycle import apply_snapshot, claim_quiet, claim_unsubmitted, unknown_job
from workers.errors import CallError, PermanentError
from workers.rate_limit import TokenBucket

log = logging.getLogger(__name__)
NOT_FOUND = 404


@dataclass
class ReconcileReport:
    checked: int = 0
    applied: int = 0
    unknown: int = 0
    errors: int = 0
    redriven: int = 0
    by_provider: dict[str, int] = field(default_factory=dict)


def reconcile(
    ctx: Liaison, now: datetime, *, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic, max_batches: int = 20,
) -> ReconcileReport:
    report = ReconcileReport()
    batch = ctx.settings.beat_batch
    for name, provider in ctx.providers.items():
        ps = ctx.settings.providers[name]
        bucket = TokenBucket(ps.rate_limit_per_s)
        for _ in range(max_batches):
            with ctx.db.transaction() as session:
                quiet = claim_quiet(session, name, ps.reconcile_after_s, now, batch)
            for task in quiet:
                sleep(bucket.wait_for(clock()))
                report.checked += 1
                report.by_provider[name] = report.by_provider.get(name, 0) + 1
                try:
                    snapshot = provider.status(task.vendor_job_id)
                except PermanentError as exc:
                    if exc.status == NOT_FOUND:
                        report.unknown += 1
                        with ctx.db.transaction() as session:
                            unknown_job(session, task, name, str(exc), now)
                    else:
                        report.errors += 1
                    continue
                except CallError as exc:
                    report.errors += 1
                    log.warning("reconcile: %s status of %s failed: %s", name, task.correlation_id, exc)
                    continue
                with ctx.db.transaction() as session:
                    result = apply_snapshot(session, name, snapshot.job_id, snapshot.status, snapshot.outcome, now)
                if result is not None:
                    report.applied += result.status == "applied"
                    ctx.publisher.publish(result.outbox)
            if len(quiet) < batch:
                break
    quiet_s = min((ps.reconcile_after_s for ps in ctx.settings.providers.values()), default=900)
    with ctx.db.transaction() as session:
        rows = claim_unsubmitted(session, quiet_s, now, batch)
    report.redriven = ctx.publisher.publish(rows)
    return report
