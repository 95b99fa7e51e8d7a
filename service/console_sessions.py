"""Console sessions on the server (issue 44): opened at sign-in, looked up on every console
request, ended at sign-out (this browser's, or every one of the operator's).

Operators have no table of their own: anyone holding the admin token signs in under a name, so a
session is the unit to revoke, not an operator's "epoch". A row per session (``models.console_sessions``),
in the database so that a sign-out holds in every web process; the cookie carries a random id and
the row its SHA-256. Expired rows are refused at once and deleted at the next sign-in, on an index,
so the table holds at most one session lifetime of sign-ins."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from models.db import Database
from models.store import store_of


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(db: Database, operator: str, now: datetime, lifetime_s: int) -> str:
    """A new session for ``operator``; returns its id (for the cookie only). Removes expired ones."""
    session_id = secrets.token_urlsafe(32)
    with db.transaction() as session:
        expires_at = now + timedelta(seconds=lifetime_s)
        store_of(session).credentials.open_console_session(session, _hash(session_id), operator, now, expires_at)
    return session_id


def live_operator(session: Session, session_id: str, now: datetime) -> str | None:
    """The operator of a session still open and not expired; None for any other id."""
    return store_of(session).credentials.console_operator(session, _hash(session_id), now)


def end_session(db: Database, session_id: str) -> None:
    with db.transaction() as session:
        store_of(session).credentials.end_console_session(session, _hash(session_id))


def end_operator_sessions(db: Database, operator: str) -> int:
    """Sign ``operator`` out everywhere: every session under that name; returns how many."""
    with db.transaction() as session:
        return store_of(session).credentials.end_console_sessions_of(session, operator)
