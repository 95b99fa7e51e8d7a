"""Beat jobs: thin wrappers over idempotent, lease-safe functions (safe when two beats run)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TypeVar

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from core.notifications import DigestRule
from models.base import utcnow
from runtime.context import liaison
from service import dispatch
from service.notices import Routes
from service.notices import dispatch as dispatch_notices
from service.orphans import flag_stale_orphans
from service.retention import Retention, prune
from service.retention import prune_processed_messages as prune_inbox
from workers.deadlines import check_deadlines as run_check_deadlines
from workers.polling import poll as run_poll
from workers.reconcile import reconcile as run_reconcile

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


@shared_task(name="liaison.dispatch")
@stops_at_soft_limit
def dispatch_queued() -> int:
    """Release queued submissions that have room (service.dispatch), each queue in a transaction of its
    own: what the releases at submit and at each state change missed (a race, a crash) waits seconds."""
    ctx = liaison()
    with ctx.db.transaction() as session:
        pairs = dispatch.queued_pairs(session)
    released = 0
    for provider, client_id in pairs:
        with ctx.db.transaction() as session:
            released += dispatch.release(session, provider, client_id, utcnow())
    if released:
        log.info("dispatch released %d queued submissions", released)
    return released


@shared_task(name="liaison.retention")
@stops_at_soft_limit
def retention() -> dict[str, int]:
    """Every kind of finished work past its retention (service.retention). A run cut off by the
    soft limit (a first run over a large backlog) committed its batches; the next carries on."""
    ctx = liaison()
    removed = prune(ctx.db, utcnow(), Retention.from_settings(ctx.settings))
    log.info("retention removed %s", removed)
    return removed


@shared_task(name="liaison.prune_processed_messages")
@stops_at_soft_limit
def prune_processed_messages() -> int:
    """No longer scheduled (``liaison.retention`` covers it); still registered, so a message an
    older beat queued before an upgrade runs instead of being dead-lettered as unknown."""
    ctx = liaison()
    removed = prune_inbox(ctx.db, utcnow(), ctx.settings.processed_retention_s)
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


@shared_task(name="liaison.dispatch_notifications")
@stops_at_soft_limit
def dispatch_notifications() -> int:
    """Pending notices become outbox rows: alone while calm, one digest in a burst."""
    ctx = liaison()
    settings = ctx.settings
    routes = Routes(email=settings.notify_email_kinds, chat=settings.notify_chat_kinds)
    rule = DigestRule(settings.notify_digest_threshold, settings.notify_digest_window_s)
    with ctx.db.transaction() as session:
        done = dispatch_notices(session, utcnow(), routes, rule)
    if done.messages or done.muted:
        log.info("notifications: %s", done)
    return done.messages


@shared_task(name="liaison.poll")
@stops_at_soft_limit
def poll() -> dict[str, int]:
    """Due polls of open jobs (``LIAISON_PROVIDER_<NAME>_POLL_SCHEDULE_S``) and ``confirm`` hints'
    follow-ups become status checks (``workers.polling``)."""
    return run_poll(liaison(), utcnow())
