"""Publish outbox rows to Celery after their transaction committed, and sweep what was missed.

Publishing can fail (broker down) or be lost (a crash between commit and publish, a broker that
loses messages): the row stays in the database and the sweep publishes it again. Consumers are
idempotent on the outbox id, so publishing twice is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from celery import Celery
from kombu.exceptions import KombuError, OperationalError

from foundation import tracing
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from service.start_leases import requeue_unstarted

log = logging.getLogger(__name__)

TASK_FOR_KIND = {
    OutboxKind.SUBMIT: "liaison.submit",
    OutboxKind.CANCEL: "liaison.cancel",
    OutboxKind.RELAY: "liaison.relay",
    OutboxKind.NOTIFY: "liaison.notify",
    OutboxKind.PROBE: "liaison.probe",
    OutboxKind.CHANNEL: "liaison.channel",
    OutboxKind.CHECK: "liaison.check",
}
#: Reconnect once (a pooled connection may be stale after a broker restart), then leave it to the
#: sweep: a request must not hang on a broker that is down.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
#: the kinds whose messages carry the stamp they were published under: a copy the row was published
#: again since does nothing (``service.start_leases.superseded``)
STAMPED = (OutboxKind.SUBMIT, OutboxKind.RELAY)


class Publisher:
    def __init__(self, celery: Celery, db: Database) -> None:
        self.celery = celery
        self.db = db

    def _send(self, rows: Iterable[OutboxMessage]) -> list[int]:
        with tracing.detached():  # a message carries no context of whoever committed it (issue 44)
            return self._send_each(rows)

    def _send_each(self, rows: Iterable[OutboxMessage]) -> list[int]:
        """Each row's message; the rest are left for the sweep once the broker refuses one."""
        sent: list[int] = []
        for row in rows:
            try:
                stamped = row.dispatched_at.isoformat() if row.kind in STAMPED and row.dispatched_at else None
                self.celery.send_task(
                    TASK_FOR_KIND[row.kind],
                    args=[row.id],
                    kwargs={"published": stamped} if stamped else None,
                    retry=True,
                    retry_policy=PUBLISH_RETRY,
                    # the worker's log context (app.observability.celery_signals), read without a query
                    headers={"liaison_message_id": row.message_id, "liaison_correlation_id": row.correlation_id},
                )
            except (OperationalError, KombuError, OSError) as exc:
                log.warning(
                    "outbox publish failed, left for the sweep: %s",
                    type(exc).__name__,
                    extra={"outbox_id": row.id, "message_id": row.message_id},
                )
                break  # the broker is down: the rest would fail the same way
            sent.append(row.id)
        return sent

    def publish(self, rows: Iterable[OutboxMessage]) -> int:
        """Publish rows committed just now, stamped ``dispatched_at`` in their transaction
        (``models.publishing``). Rows the broker did not take are un-stamped for the sweep."""
        rows = list(rows)
        sent = set(self._send(rows))
        for stamp, ids in _by_stamp(row for row in rows if row.id not in sent).items():
            self._unstamp(ids, stamp)
        return len(sent)

    def _unstamp(self, ids: list[int], stamp: datetime) -> None:
        if ids:
            with self.db.transaction() as session:
                store_of(session).outbox.unstamp(session, ids, stamp)

    def sweep(self, now: datetime, grace_s: int, lease_s: int, batch: int = 500) -> int:
        """Publish rows never published (older than ``grace_s``), rows whose held retry is due, rows
        whose start lease ran out (a worker died with the message: ``service.start_leases``) and
        rows published but not done within ``lease_s`` (the broker lost them). A submission that
        never started goes back to its client's queue instead when its vendor has a capacity
        (``requeue_unstarted``). Rows are claimed with
        ``SKIP LOCKED`` (a serialising ``BEGIN IMMEDIATE`` on SQLite), so two beats never both
        publish one row."""
        with self.db.transaction() as session:
            rows = store_of(session).outbox.claim_for_sweep(session, now, grace_s, lease_s, batch)
            requeued = requeue_unstarted(session, rows, now)
            rows = [row for row in rows if row.id not in requeued]
            for row in rows:
                store_of(session).outbox.publish(session, row, now)
                store_of(session).outbox.due_now(row)
        if requeued:
            log.info("outbox sweep: %d submissions lost before they started went back to their queues", len(requeued))
        sent = set(self._send(rows))
        self._unstamp([row.id for row in rows if row.id not in sent], now)
        return len(sent)


def _by_stamp(rows: Iterable[OutboxMessage]) -> dict[datetime, list[int]]:
    """Unsent rows' ids by their stamp (a row without one was never stamped: nothing to undo)."""
    groups: dict[datetime, list[int]] = {}
    for row in rows:
        if row.dispatched_at is not None:
            groups.setdefault(row.dispatched_at, []).append(row.id)
    return groups
