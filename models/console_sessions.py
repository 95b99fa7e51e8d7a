"""The console's signed-in sessions (issue 44): one row per sign-in, removed at sign-out.

The cookie alone cannot be taken back: it is signed, so a copy of it (another tab, a stolen one)
would work until it expires. The row is what makes it a session: ``app.console.access`` accepts a
cookie only while its row exists and has not expired, in every web process, since all of them read
the same table. The row is keyed by the SHA-256 of the session id the cookie carries, so reading the
table gives no one a session. ``service.console_sessions`` opens and ends them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UtcDateTime


class ConsoleSession(Base):
    __tablename__ = "console_sessions"
    __table_args__ = (
        Index("ix_console_sessions_operator", "operator"),
        Index("ix_console_sessions_expires_at", "expires_at"),
    )

    #: SHA-256 (hex) of the session id in the cookie; the id itself is stored nowhere
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: the name the operator signed in with: the actor of every action in this session
    operator: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    #: refused from then on, whatever the cookie says (``LIAISON_CONSOLE_SESSION_S`` after sign-in)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
