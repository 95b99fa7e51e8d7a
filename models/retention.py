"""Retention: records kept only for a while are deleted once past it (beat, hourly), touching only
due rows, on an index, in small batches."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from models.db import Database
from models.messages import ProcessedMessage

PRUNE_BATCH = 1000


def prune_processed_messages(
    db: Database,
    now: datetime,
    retention_s: int,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete inbox rows older than the retention, one short transaction per batch, until none is
    left. Two runs at once are harmless: each batch's rows are locked with SKIP LOCKED."""
    cutoff = now - timedelta(seconds=retention_s)
    removed = 0
    while True:
        with db.transaction() as session:
            ids = session.scalars(
                select(ProcessedMessage.id)
                .where(ProcessedMessage.processed_at < cutoff)
                .order_by(ProcessedMessage.processed_at)
                .limit(batch)
                .with_for_update(skip_locked=True)
            ).all()
            if ids:
                session.execute(delete(ProcessedMessage).where(ProcessedMessage.id.in_(ids)))
        removed += len(ids)
        if progress is not None and ids:
            progress(removed)
        if len(ids) < batch:
            return removed
