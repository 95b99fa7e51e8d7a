"""What operators did, on the record of the thing they touched: a dead letter, an incident, an
orphan event, a callback endpoint. (A task's own timeline, ``task_events``, carries the operator
too: ``by`` in the event's detail.) Written in the transaction of the action itself; read by the console's pages
(``models.read_models.console_pages.operator_history``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, Session, mapped_column

from models.base import Base, Id, Json, UtcDateTime, utcnow

#: the things an operator event can be about (``subject``)
SUBJECTS = ("dead_letter", "incident", "orphan", "endpoint")


class OperatorEvent(Base):
    __tablename__ = "operator_events"
    __table_args__ = (Index("ix_operator_events_subject", "subject", "subject_id", "id"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(32))
    subject_id: Mapped[int] = mapped_column(Id)
    detail: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)


def record(
    session: Session, subject: str, subject_id: int, action: str, actor: str, now: datetime, **detail: Any
) -> None:
    assert subject in SUBJECTS, subject
    session.add(
        OperatorEvent(at=now, actor=actor, action=action, subject=subject, subject_id=subject_id, detail=detail)
    )
