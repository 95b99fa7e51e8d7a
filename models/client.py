"""Domain apps: who may submit tasks, with which API keys, and whom we call back."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import Float, ForeignKey, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, Id, Json, UtcDateTime, utcnow

API_KEY_PREFIX = "lk_"
#: How much of a key is kept in clear to name it (``lk_`` + 7 of its 43 random characters):
#: enough for a person to tell keys apart, far too little to guess the rest.
DISPLAY_PREFIX_LEN = 10


def generate_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(api_key: str) -> str:
    """API keys are 256-bit random tokens, so one SHA-256 suffices (no password stretching needed)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def display_prefix(api_key: str) -> str:
    return api_key[:DISPLAY_PREFIX_LEN]


class Client(Base):
    __tablename__ = "clients"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # Newest first; every one signs each callback so the domain app can rotate without downtime.
    callback_secrets: Mapped[list[str]] = mapped_column(Json)
    callback_url: Mapped[str | None] = mapped_column(String(2000))
    # Canonical ``scheme://host[:port]`` (core/origins.py); empty = callbacks may go anywhere.
    callback_origins: Mapped[list[str]] = mapped_column(Json, default=list, server_default=text("'[]'"))
    # A disabled client's API requests are refused (403); its tasks in flight still finish and relay.
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Limits (issue 8): None = the deployment's default (LIAISON_CLIENT_*); see app/limits.py.
    submit_rate_per_s: Mapped[float | None] = mapped_column(Float)
    submit_burst: Mapped[int | None] = mapped_column(Integer)
    max_open_tasks: Mapped[int | None] = mapped_column(Integer)
    # A broker channel (issue 13): "amqp" or "redis" (wire.channel_messages.CHANNELS), instead
    # of or besides callback_url; None = HTTP only. Its tasks copy it at submit.
    channel: Mapped[str | None] = mapped_column(String(16))
    # Fair dispatch (issue 20, core/fair_share.py): its share of a vendor's capacity and of the
    # submissions on their way (weight), the priority of its tasks that name none, and how many of
    # its tasks with one concurrency key may be open at the vendor at once.
    weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    default_priority: Mapped[int] = mapped_column(Integer, default=3, server_default="3")
    concurrency_key_limit: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    def __repr__(self) -> str:  # never the secrets
        return f"<Client {self.name}>"


class ApiKey(Base):
    """One API key of a client, kept only as its hash. A client has several while it rotates
    (both valid), then the old ones are retired; a leaked key is revoked at once. Either way the
    row stays, for the record."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The key's first characters, to tell keys apart in listings; None for keys made before
    # rotation existed (only their hash was ever stored).
    prefix: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # rotated out
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)  # withdrawn at once (leaked)

    @property
    def state(self) -> str:
        return "revoked" if self.revoked_at else "retired" if self.retired_at else "active"

    def __repr__(self) -> str:
        return f"<ApiKey {self.id} {self.prefix or '-'} {self.state}>"
