"""The per-task tokens of the ``token-url`` scheme (issue 40): a vendor that signs nothing is given,
at submit, a callback URL ``{LIAISON_PUBLIC_URL}/webhooks/<provider>/t/<token>`` whose token is
random and unguessable (``secrets.token_urlsafe(32)``). Only its SHA-256 is stored, so reading the
table gives no one a token. A row authenticates events of its own task only, and only until the task
is final (``service.ingress``). Each submit attempt adds one (a vendor that kept the first attempt's
URL, having honoured the Idempotency-Key, still reaches the task); they go with the task
(retention finds every table that points at a task: ``models.store.retention``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UtcDateTime


class CallbackToken(Base):
    __tablename__ = "callback_tokens"

    #: SHA-256 (hex) of the token in the URL; the token itself is stored nowhere
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("external_tasks.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
