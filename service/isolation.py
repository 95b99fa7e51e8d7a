"""One row's failure stays that row's: a batch (a beat job's, reconciliation's) goes on without it.

Each row's work runs in a savepoint (or, in reconciliation, its own transaction). A row that fails
with one of ``ROW_ERRORS`` is rolled back alone, logged, and an incident ``batch_row_failed`` is
opened for its task. Anything else (a lost database connection surfacing on the next statement,
KeyboardInterrupt, a Celery time limit) still stops the run, as it must.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.incidents import IncidentKind, open_incident

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What one row's data can make its processing raise: the database refusing it, a stored value too
#: deep to decode (RecursionError), a value of the wrong shape (ValueError, TypeError, KeyError).
ROW_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, RecursionError, ValueError, TypeError, KeyError)


def describe(exc: BaseException) -> str:
    """The error's type, and its message only when it cannot carry row data: SQLAlchemy's messages
    quote statement parameters (a task's input, a secret), so those are named by type alone."""
    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        return f"{type(exc).__name__}" + (f" ({type(orig).__name__})" if orig is not None else "")
    if isinstance(exc, RecursionError):
        return "RecursionError: a stored value is nested too deeply to decode"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def record_row_failure(
    session: Session,
    job: str,
    correlation_id: str | None,
    exc: BaseException,
    now: datetime,
) -> None:
    """Log the failure and open (or refresh) the row's ``batch_row_failed`` incident."""
    reason = describe(exc)
    log.error(
        "%s: task %s failed and was skipped; the batch goes on: %s",
        job,
        correlation_id,
        reason,
        extra={"correlation_id": correlation_id},
    )
    open_incident(
        session,
        IncidentKind.BATCH_ROW_FAILED,
        f"{job}:{correlation_id}",
        f"{job} could not process this task and skipped it: {reason}",
        now,
        correlation_id=correlation_id,
    )


def in_savepoint(
    session: Session,
    job: str,
    correlation_id: str | None,
    now: datetime,
    work: Callable[[], T],
) -> tuple[bool, T | None]:
    """Run one row's ``work`` in a savepoint: (True, its result), or (False, None) once a failure
    was rolled back and recorded."""
    try:
        with session.begin_nested():
            return True, work()
    except ROW_ERRORS as exc:
        record_row_failure(session, job, correlation_id, exc, now)
        return False, None
