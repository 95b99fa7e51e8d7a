"""Rate-limit state in the database, for deployments whose broker is not Redis: one row per key
holding GCRA's single number (``core.rate_limit``), taken in one statement by the store
(``models.store.rate_limits``)."""

from __future__ import annotations

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base


class RateLimitState(Base):
    __tablename__ = "rate_limits"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: GCRA's theoretical arrival time, epoch seconds (double precision: sub-microsecond today)
    tat: Mapped[float] = mapped_column(Float)
