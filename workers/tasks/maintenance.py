"""Beat jobs: thin wrappers over idempotent, lease-safe maintenance functions."""

from __future__ import annotations

import logging

from celery import shared_task

from app.extensions import liaison
from models.base import utcnow
from models.maintenance import prune_processed_messages as prune

log = logging.getLogger(__name__)


@shared_task(name="liaison.sweep_outbox")
def sweep_outbox() -> int:
    ctx = liaison()
    settings = ctx.settings
    published = ctx.publisher.sweep(utcnow(), settings.outbox_grace_s, settings.outbox_lease_s)
    if published:
        log.info("outbox sweep re-published %d rows", published)
    return published


@shared_task(name="liaison.prune_processed_messages")
def prune_processed_messages() -> int:
    ctx = liaison()
    removed = prune(ctx.db, utcnow(), ctx.settings.processed_retention_s)
    log.info("pruned %d processed messages", removed)
    return removed
