"""A client's submissions found again: a task by its correlation id, and what an earlier request
with the same Idempotency-Key or correlation id made (``service.intake``).

Correlation ids are unique per client only, so every look names the client: another tenant's task
of the same name is never found. Both databases run the same statements: one class,
:class:`Submissions`, serves both stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, bindparam, or_, select
from sqlalchemy.orm import Session

from models.statements import built_once
from models.task import ExternalTask


class Submissions:
    """The verbs, alike on both databases."""

    def find(self, session: Session, client_id: int, correlation_id: str) -> ExternalTask | None:
        """The client's task with that correlation id."""
        return session.scalar(
            select(ExternalTask).where(
                ExternalTask.client_id == client_id, ExternalTask.correlation_id == correlation_id
            )
        )

    def earlier(
        self, session: Session, client_id: int, correlation_id: str, idempotency_key: str | None
    ) -> Sequence[ExternalTask]:
        """The client's tasks an earlier request made: with ``idempotency_key`` (when given) or with
        ``correlation_id``, in one statement for both ways."""
        params = {"client_id": client_id, "correlation_id": correlation_id, "key": idempotency_key}
        return session.scalars(_earlier_statement(idempotency_key is not None), params).all()


@built_once
def _earlier_statement(with_key: bool) -> Select[tuple[ExternalTask]]:
    """:meth:`Submissions.earlier`'s statement, built once per shape. Hot statements are built once
    and reused with bound parameters: building one (and its cache key) on every call costs more CPU
    than running it."""
    same = ExternalTask.correlation_id == bindparam("correlation_id")
    if with_key:
        same = or_(ExternalTask.idempotency_key == bindparam("key"), same)
    return select(ExternalTask).where(ExternalTask.client_id == bindparam("client_id"), same)
