"""One database session per request, closed at teardown; views commit explicitly."""

from __future__ import annotations

from flask import Flask, g
from sqlalchemy.orm import Session

from runtime.context import liaison


def db_session() -> Session:
    if "db_session" not in g:
        g.db_session = liaison().db.sessionmaker()
    return g.db_session


def release() -> None:
    """Close the request's session now, before teardown: an error handler that must ask the database
    something else first (SQLite: the failed transaction's ``BEGIN IMMEDIATE`` holds the write lock
    a new connection would wait for)."""
    session = g.pop("db_session", None)
    if session is not None:
        session.close()


def init_app(app: Flask) -> None:
    @app.teardown_appcontext
    def _close(_exc: BaseException | None) -> None:
        session = g.pop("db_session", None)
        if session is not None:
            session.close()
