"""Retention's export (``LIAISON_RETENTION_EXPORT_DIR``): the rows a batch is about to delete, as
JSON lines appended to ``<dir>/<kind>-<YYYY-MM-DD>.jsonl`` and fsynced *before* the batch's delete
commits (``service.retention``).

A failed write raises :class:`ExportFailed`, the transaction rolls back, nothing is deleted, and the
run stops there (the job logs and the next run tries again). A commit that fails after the write
leaves rows exported but not deleted: they are exported again by the next run (at least once,
never lost).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from models.store import store_of


class ExportFailed(Exception):
    """Writing the export failed: the batch was not deleted."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot export a {type(value).__name__}")


def export_lines(session: Session, kind: str, ids: Sequence[int]) -> list[str]:
    """One JSON line per removed row; a task's line carries every row that belongs to it, by table."""
    pruning = store_of(session).retention
    if kind != "tasks":
        return [json.dumps({"kind": kind, "row": r}, default=_jsonable) for r in pruning.rows(session, kind, ids)]
    return [
        json.dumps({"kind": kind, "row": task, "belongs": belongs}, default=_jsonable)
        for task, belongs in pruning.tasks_with_rows(session, ids)
    ]


def append_export(directory: Path, kind: str, day: date, lines: Iterable[str]) -> None:
    """Append the lines to the kind's file for the day, under an exclusive lock (two beats may
    export at once), and fsync. A failed or short write is cut back off, so the file holds only
    whole lines; either way ExportFailed is raised and the caller's transaction rolls back."""
    data = "".join(line + "\n" for line in lines).encode()
    path = directory / f"{kind}-{day.isoformat()}.jsonl"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ExportFailed(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, start)
            raise ExportFailed(f"cannot write {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
