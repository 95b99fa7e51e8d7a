"""The ``token-url`` scheme's side of the database: a token issued at submit (its SHA-256 stored, in
the submit's start transaction, so it works before the vendor can use it), and the task a token
belongs to. See ``models.callback_tokens``."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from core.states import State
from models.callback_tokens import CallbackToken
from models.store import store_of
from webhooks.schemes import token_digest


def issue(session: Session, task_id: int, now: datetime) -> str:
    """A new token for ``task_id``; only its digest is kept (the caller puts the token in the URL)."""
    token = secrets.token_urlsafe(32)
    session.add(CallbackToken(digest=token_digest(token), task_id=task_id, created_at=now))
    return token


@dataclass(frozen=True)
class TokenTask:
    """What a token's check needs of its task (read, not locked: ``receive_event`` locks it to apply)."""

    state: State
    vendor_job_id: str | None


def task_of(session: Session, provider: str, digest: str) -> TokenTask | None:
    """The task whose token has ``digest``, if it is ``provider``'s; None for a token nobody issued."""
    found = store_of(session).credentials.token_task(session, provider, digest)
    return None if found is None else TokenTask(State(found[0]), found[1])
