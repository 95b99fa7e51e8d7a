"""Retention: finished work is deleted once it has been quiet for its kind's retention (beat, hourly),
touching only due rows, on an index, in small batches, each batch one short transaction.

What is due for each kind, and what removing it takes, is the store's (``models.store.retention``:
nothing open is ever removed); the export of what a batch removes, ``service.retention_export``.
This module is the run: how long each kind is kept, and the batches, one transaction each.

Two runs at once (two beats, or beat and ``liaison prune``) are harmless: on PostgreSQL each batch
locks its rows ``FOR UPDATE SKIP LOCKED``, so the runs take disjoint batches and a task a worker
holds is skipped, not waited for; on SQLite every transaction is ``BEGIN IMMEDIATE`` (models.db), so
batches run one after the other and the second finds the first's rows gone.

Export (``LIAISON_RETENTION_EXPORT_DIR``): each batch's rows are written and fsynced *before* the
batch's delete commits; a failed write deletes nothing and stops the run there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from foundation.settings import Settings
from models.db import Database
from models.store import store_of
from service.retention_export import append_export, export_lines

PRUNE_BATCH = 1000
DAY_S = 86400
DEFAULT_RETENTION_S = 30 * DAY_S

#: every kind, in the order a run handles them: tasks first (they take their own outbox rows along)
KINDS = ("tasks", "outbox", "dead_letters", "incidents", "notifications", "orphans", "processed_messages")


@dataclass(frozen=True)
class Retention:
    """How long each kind is kept after it finished (seconds), and where removed rows are exported."""

    tasks_s: int = DEFAULT_RETENTION_S
    outbox_s: int = DEFAULT_RETENTION_S
    dead_letters_s: int = DEFAULT_RETENTION_S
    incidents_s: int = DEFAULT_RETENTION_S
    orphans_s: int = DEFAULT_RETENTION_S
    processed_messages_s: int = 4 * DAY_S
    export_dir: Path | None = None
    batch: int = PRUNE_BATCH

    @classmethod
    def from_settings(cls, settings: Settings) -> Retention:
        return cls(
            tasks_s=settings.retention_tasks_s,
            outbox_s=settings.retention_outbox_s,
            dead_letters_s=settings.retention_dead_letters_s,
            incidents_s=settings.retention_incidents_s,
            orphans_s=settings.retention_orphans_s,
            processed_messages_s=settings.processed_retention_s,
            export_dir=Path(settings.retention_export_dir) if settings.retention_export_dir else None,
        )

    def seconds(self, kind: str) -> int:
        if kind == "notifications":
            return self.incidents_s  # a notice is kept as long as the incident it told of
        value: int = getattr(self, f"{kind}_s")
        return value


# --- the run ----------------------------------------------------------------------------------------


def prune_kind(
    db: Database,
    kind: str,
    now: datetime,
    retention_s: int,
    *,
    batch: int = PRUNE_BATCH,
    export_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Remove every due row of one kind, a batch per transaction, until a batch comes back short."""
    cutoff = now - timedelta(seconds=retention_s)
    removed = 0
    while True:
        with db.transaction() as session:
            pruning = store_of(session).retention
            ids = pruning.due(session, kind, cutoff, batch)
            if ids:
                if export_dir is not None:
                    append_export(export_dir, kind, now.date(), export_lines(session, kind, ids))
                pruning.remove(session, kind, ids)
        removed += len(ids)
        if progress is not None and ids:
            progress(removed)
        if len(ids) < batch:
            return removed


def prune(
    db: Database,
    now: datetime,
    retention: Retention,
    kinds: Iterable[str] = KINDS,
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Every kind's due rows; how many of each were removed."""
    removed: dict[str, int] = {}
    for kind in kinds:
        report = None if progress is None else (lambda n, k=kind: progress(k, n))
        removed[kind] = prune_kind(
            db,
            kind,
            now,
            retention.seconds(kind),
            batch=retention.batch,
            export_dir=retention.export_dir,
            progress=report,
        )
    return removed


def prune_processed_messages(
    db: Database,
    now: datetime,
    retention_s: int,
    batch: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """The inbox alone (what ``liaison.prune_processed_messages`` did before the other kinds)."""
    return prune_kind(db, "processed_messages", now, retention_s, batch=batch, progress=progress)
