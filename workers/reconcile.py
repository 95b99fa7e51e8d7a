"""Reconciliation: ask each provider about tasks that have been quiet too long, and apply what it
says through the webhook path. Provider calls happen outside any transaction, paced by the
provider's shared rate limit (the same one submit and cancel take their slots from, in every
process: ``workers.providers.limited``); each result is applied in its own short transaction. One run at a time per
provider (a lease), and a run stops claiming work after ``reconcile_max_run_s``, so runs from two
beats, the CLI or the admin API never add up to more than the rate limit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from core.classify import Failure
from core.errors import CallError, PermanentError
from foundation import tracing
from models.store.slots import lease
from runtime.context import Liaison
from runtime.limiter import RateLimited
from runtime.provider import JobSnapshot, Provider
from service.isolation import ROW_ERRORS, record_row_failure
from service.reconciliation import QuietTask, apply_snapshot, claim_quiet, claim_unsubmitted, unknown_job

log = logging.getLogger(__name__)
NOT_FOUND = 404


@dataclass
class ReconcileReport:
    checked: int = 0
    applied: int = 0
    unknown: int = 0
    errors: int = 0
    #: tasks whose answer could not be applied (or was refused: an outcome past its limits); each
    #: has a ``batch_row_failed`` incident, and the run went on
    failed: int = 0
    redriven: int = 0
    by_provider: dict[str, int] = field(default_factory=dict)
    #: providers another run was reconciling (it holds their lease): left to it, so that two runs
    #: never pace themselves separately and together exceed the provider's rate limit
    skipped: list[str] = field(default_factory=list)
    #: providers whose run ended on ``reconcile_max_run_s`` with quiet tasks left for the next run
    unfinished: list[str] = field(default_factory=list)


def reconcile(
    ctx: Liaison,
    now: datetime,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ReconcileReport:
    """One run over every provider, each under its lease and within ``reconcile_max_run_s``."""
    report = ReconcileReport()
    max_run_s = ctx.settings.reconcile_max_run_s
    for name in ctx.providers:
        # The lease outlives the run's budget by the longest a last call can take.
        with lease(ctx.db, f"reconcile:{name}", now, ttl_s=max_run_s + 120) as held:
            if not held:
                report.skipped.append(name)
                continue
            _reconcile_provider(ctx, name, now, report, sleep=sleep, clock=clock, until=clock() + max_run_s)
    quiet_s = min((ps.reconcile_after_s for ps in ctx.settings.providers.values()), default=900)
    with ctx.db.transaction() as session:
        report.redriven = len(claim_unsubmitted(session, quiet_s, now, ctx.settings.beat_batch))
    return report


def _reconcile_provider(
    ctx: Liaison,
    name: str,
    now: datetime,
    report: ReconcileReport,
    *,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    until: float,
) -> None:
    """Quiet tasks of one provider, oldest first, in batches, paced by its rate limit."""
    provider, ps = ctx.providers[name], ctx.settings.providers[name]
    batch = ctx.settings.beat_batch
    while True:
        if clock() >= until:
            report.unfinished.append(name)
            return
        with ctx.db.transaction() as session:
            quiet = claim_quiet(session, name, ps.reconcile_after_s, now, batch)
        for task in quiet:
            report.checked += 1
            report.by_provider[name] = report.by_provider.get(name, 0) + 1
            with tracing.continued(task.traceparent, "liaison.reconcile task", provider=name):
                _reconcile_task(ctx, name, provider, task, now, report, sleep)
        if len(quiet) < batch:
            return


def _reconcile_task(
    ctx: Liaison,
    name: str,
    provider: Provider,
    task: QuietTask,
    now: datetime,
    report: ReconcileReport,
    sleep: Callable[[float], None],
) -> None:
    """Ask the vendor about one quiet task and apply its answer (in the task's trace)."""
    try:
        snapshot = _status_when_slot(provider, task.vendor_job_id, sleep)
    except PermanentError as exc:
        if exc.status == NOT_FOUND:
            report.unknown += 1
            with ctx.db.transaction() as session:
                unknown_job(session, task, name, str(exc), now)
        elif exc.failure is Failure.BAD_RESPONSE:  # e.g. an outcome past its limits: refused, recorded
            _row_failed(ctx, name, task, exc, now, report)
        else:
            report.errors += 1
        return
    except CallError as exc:
        report.errors += 1
        log.warning("reconcile: %s status of %s failed: %s", name, task.correlation_id, exc)
        return
    try:
        with ctx.db.transaction() as session:
            result = apply_snapshot(session, name, snapshot.job_id, snapshot.status, snapshot.outcome, now)
    except ROW_ERRORS as exc:  # this task's transaction rolled back; the others go on
        _row_failed(ctx, name, task, exc, now, report)
        return
    if result is not None:
        report.applied += result.status == "applied"


def _row_failed(
    ctx: Liaison, name: str, task: QuietTask, exc: BaseException, now: datetime, report: ReconcileReport
) -> None:
    report.failed += 1
    with ctx.db.transaction() as session:
        record_row_failure(session, f"reconcile:{name}", task.correlation_id, exc, now)


def _status_when_slot(provider: Provider, job_id: str, sleep: Callable[[float], None]) -> JobSnapshot:
    """``status`` once the shared rate limit gives a slot: reconcile waits for it, as it always has
    (a slot within ``LIAISON_PROVIDER_RATE_MAX_WAIT_S`` is waited for inside the provider call)."""
    while True:
        try:
            return provider.status(job_id)
        except RateLimited as exc:
            sleep(exc.retry_after_s)
