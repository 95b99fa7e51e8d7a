"""Domain apps: who may submit tasks and whom we call back."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, Id, Json, UtcDateTime, utcnow

API_KEY_PREFIX = "lk_"


def generate_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(api_key: str) -> str:
    """API keys are 256-bit random tokens, so one SHA-256 suffices (no password stretching needed)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


class Client(Base):
    __tablename__ = "clients"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # Newest first; every one signs each callback so the domain app can rotate without downtime.
    callback_secrets: Mapped[list[str]] = mapped_column(Json)
    callback_url: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Limits (issue 8): None = the deployment's default (LIAISON_CLIENT_*); see app/limits.py.
    submit_rate_per_s: Mapped[float | None] = mapped_column(Float)
    submit_burst: Mapped[int | None] = mapped_column(Integer)
    max_open_tasks: Mapped[int | None] = mapped_column(Integer)

    def __repr__(self) -> str:  # never the secrets
        return f"<Client {self.name}>"
