"""Credentials' statements: clients and their API keys (``service.credentials``), the console's
signed-in sessions (``service.console_sessions``) and the ``token-url`` scheme's callback tokens
(``service.callback_tokens``). Only digests are stored and looked up here (a key's hash, a session
id's SHA-256, a token's): the secrets themselves never reach the store.

Both databases run the same statements (a client's ``FOR UPDATE`` is PostgreSQL's; SQLite's
compiler leaves it out, its ``BEGIN IMMEDIATE`` serialising writers already), so one class serves
both stores.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, bindparam, delete, select
from sqlalchemy.orm import Session

from models.callback_tokens import CallbackToken
from models.client import ApiKey, Client
from models.console_sessions import ConsoleSession
from models.statements import built_once
from models.task import ExternalTask


class Credentials:
    """The verbs of credentials, alike on both databases."""

    # --- clients and their API keys ----------------------------------------------------------------

    def client_named(self, session: Session, name: str, *, lock: bool = False) -> Client | None:
        """The client called ``name`` (locked for the rest of the transaction when ``lock``)."""
        query = select(Client).where(Client.name == name)
        return session.scalar(query.with_for_update() if lock else query)

    def name_taken(self, session: Session, name: str) -> bool:
        """Is there a client called ``name`` already?"""
        return session.scalar(select(Client.id).where(Client.name == name)) is not None

    def clients(self, session: Session) -> list[Client]:
        """Every client, by name."""
        return list(session.scalars(select(Client).order_by(Client.name)))

    def client_of_key(self, session: Session, key_hash: str) -> Client | None:
        """The client owning the key whose hash is ``key_hash`` if the key is live (neither retired
        nor revoked): one lookup on the unique ``key_hash`` index, on every API request."""
        return session.scalar(_authenticate_statement(), {"key_hash": key_hash})

    def keys_of(self, session: Session, client_id: int) -> list[ApiKey]:
        """Every key of the client, newest first (retired and revoked ones too)."""
        query = select(ApiKey).where(ApiKey.client_id == client_id).order_by(ApiKey.created_at.desc(), ApiKey.id.desc())
        return list(session.scalars(query))

    def clients_on_channel(self, session: Session, channel: str) -> list[tuple[int, str]]:
        """(id, name) of every client whose tasks' events go to ``channel``, by id."""
        rows = session.execute(select(Client.id, Client.name).where(Client.channel == channel).order_by(Client.id))
        return [(id_, name) for id_, name in rows]

    # --- console sessions --------------------------------------------------------------------------

    def open_console_session(
        self, session: Session, id_hash: str, operator: str, now: datetime, expires_at: datetime
    ) -> None:
        """A session for ``operator`` keyed by ``id_hash``; the sessions expired by ``now`` are
        deleted first (on their index), so the table holds at most one lifetime of sign-ins."""
        session.execute(delete(ConsoleSession).where(ConsoleSession.expires_at <= now))
        session.add(ConsoleSession(id_hash=id_hash, operator=operator, created_at=now, expires_at=expires_at))

    def console_operator(self, session: Session, id_hash: str, now: datetime) -> str | None:
        """The operator of the session ``id_hash`` if it has not expired by ``now``."""
        return session.scalar(
            select(ConsoleSession.operator).where(ConsoleSession.id_hash == id_hash, ConsoleSession.expires_at > now)
        )

    def end_console_session(self, session: Session, id_hash: str) -> None:
        session.execute(delete(ConsoleSession).where(ConsoleSession.id_hash == id_hash))

    def end_console_sessions_of(self, session: Session, operator: str) -> int:
        """End every session of ``operator``; how many there were."""
        result = session.execute(delete(ConsoleSession).where(ConsoleSession.operator == operator))
        return int(getattr(result, "rowcount", 0) or 0)

    # --- callback tokens ---------------------------------------------------------------------------

    def token_task(self, session: Session, provider: str, digest: str) -> tuple[str, str | None] | None:
        """(state, vendor job id) of the task whose token has ``digest``, if it is ``provider``'s;
        None for a token nobody issued (read, not locked)."""
        row = session.execute(
            select(ExternalTask.state, ExternalTask.vendor_job_id)
            .join(CallbackToken, CallbackToken.task_id == ExternalTask.id)
            .where(CallbackToken.digest == digest, ExternalTask.provider == provider)
        ).first()
        return None if row is None else (row.state, row.vendor_job_id)


@built_once
def _authenticate_statement() -> Select[tuple[Client]]:
    """Built once (every API request runs it): building a statement costs more than running it."""
    return (
        select(Client)
        .join(ApiKey, ApiKey.client_id == Client.id)
        .where(ApiKey.key_hash == bindparam("key_hash"), ApiKey.retired_at.is_(None), ApiKey.revoked_at.is_(None))
    )
