"""Fair dispatch's statements (``service.dispatch`` decides, ``core.fair_share`` rules): what waits,
what a vendor and a concurrency key have open, the clients and tasks a release chooses among, and
the release itself.

Both databases run the same statements (plain SQL: a ``NOT IN`` over the keys at their limit
rather than a window function, which ``FOR UPDATE`` forbids; the task states as the partial
indexes' literal predicates, ``models.task``), so one class serves both stores. Serialising
releases is the locks family's (``models.store.locks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session, aliased

from models.client import Client
from models.statements import built_once
from models.task import QUEUED, RELEASED_OPEN, ExternalTask


class FairDispatch:
    """The verbs of fair dispatch, alike on both databases."""

    def anything_queued(self, session: Session, provider: str, client_id: int | None) -> bool:
        """Does any task of ``provider`` wait (of ``client_id`` only, when given)?"""
        scope = {"provider": provider, "client_id": client_id}
        return session.scalar(_any_queued(client_id is not None), scope) is not None

    def open_at_vendor(self, session: Session, provider: str) -> int:
        """How many released tasks of ``provider`` are open at the vendor: what its capacity is spent on."""
        return session.scalar(_open_at_vendor(), {"provider": provider}) or 0

    def open_with_key(self, session: Session, provider: str, client_id: int, key: str) -> int:
        """A client's released tasks of one concurrency key open at the vendor: what the key counts."""
        params = {"provider": provider, "client_id": client_id, "key": key}
        return session.scalar(_open_with_key(), params) or 0

    def key_limit(self, session: Session, client_id: int) -> int:
        """How many tasks of one concurrency key the client may have open at the vendor."""
        return session.scalar(_KEY_LIMIT, {"client_id": client_id}) or 1

    def clients_waiting(self, session: Session, provider: str, client_id: int | None) -> Sequence[Row[Any]]:
        """Per client with queued tasks for ``provider`` (``client_id``'s alone, when given): its
        name, weight, concurrency key limit, open jobs, on its way, waiting, first rank."""
        scope = {"provider": provider, "client_id": client_id}
        return session.execute(_candidates(client_id is not None), scope).all()

    def eligible(
        self,
        session: Session,
        provider: str,
        client_id: int,
        key_limit: int,
        limit: int,
        full: list[str],
        after: tuple[datetime, int] | None,
    ) -> Sequence[Row[Any]]:
        """A page of the client's queued tasks in rank order (id, key, rank, the key's open jobs at
        the vendor), without those whose key is at its limit there nor those of the keys in
        ``full``, after the task ``after`` (rank, id) when given; a task another transaction holds
        is skipped."""
        page: dict[str, Any] = {
            "provider": provider,
            "client_id": client_id,
            "key_limit": key_limit,
            "limit": limit,
            "full": full,
        }
        if after is not None:
            page.update(after_rank=after[0], after_id=after[1])
        return session.execute(_eligible(after is not None, bool(full)), page).all()

    def release(self, session: Session, ids: list[int], now: datetime) -> list[tuple[int, datetime, int]]:
        """Release those of ``ids`` still queued (``dispatched_at`` now, no wait reason): their
        (id, created_at, priority), in one ``UPDATE … RETURNING``."""
        released = session.execute(_RELEASE, {"ids": ids, "now": now})
        return [(task_id, created, priority) for task_id, created, priority in released]

    def queues(self, session: Session) -> list[tuple[str, int]]:
        """(provider, client) of every queue that holds tasks."""
        return [(provider, client_id) for provider, client_id in session.execute(_QUEUES)]


_T = ExternalTask.__table__
assert isinstance(_T, Table)
_RELEASE = (
    update(_T)
    .where(_T.c.id.in_(bindparam("ids", expanding=True)), text(QUEUED))
    .values(dispatched_at=bindparam("now"), wait_reason=None)
    .returning(_T.c.id, _T.c.created_at, _T.c.priority)
)

_KEY_LIMIT = select(Client.concurrency_key_limit).where(Client.id == bindparam("client_id"))
_QUEUES = select(ExternalTask.provider, ExternalTask.client_id).where(text(QUEUED)).distinct()


@built_once
def _open_at_vendor() -> Select[Any]:
    """How many released tasks of a provider are open at the vendor: what its capacity is spent on."""
    return (
        select(func.count())
        .select_from(ExternalTask)
        .where(ExternalTask.provider == bindparam("provider"), text(RELEASED_OPEN))
    )


@built_once
def _open_with_key() -> Select[Any]:
    """A client's released tasks of one key open at the vendor: what its concurrency key counts."""
    return (
        select(func.count())
        .select_from(ExternalTask)
        .where(
            ExternalTask.provider == bindparam("provider"),
            ExternalTask.client_id == bindparam("client_id"),
            ExternalTask.concurrency_key == bindparam("key"),
            text(RELEASED_OPEN),
        )
    )


def queued_behind(one_client: bool) -> ColumnElement[bool]:
    """:meth:`FairDispatch.anything_queued` as a column of a statement that reads the task whose
    move may release them (``service.claims``: a submission's record claims its row with it): one
    round trip fewer. Read before the move rather than after it, the look can miss a
    task queued in between, as it could miss one queued before the commit: beat's ``liaison.dispatch``
    releases it seconds later (the module's "nothing is left behind")."""
    queued = aliased(ExternalTask)
    look = select(queued.id).where(
        queued.provider == ExternalTask.provider,
        queued.state == literal_column("'requested'"),  # a literal: the partial index's predicate
        queued.dispatched_at.is_(None),
    )
    if one_client:
        look = look.where(queued.client_id == ExternalTask.client_id)
    return look.exists()


@built_once
def _any_queued(one_client: bool) -> Select[Any]:
    query = select(ExternalTask.id).where(ExternalTask.provider == bindparam("provider"), text(QUEUED))
    if one_client:
        query = query.where(ExternalTask.client_id == bindparam("client_id"))
    return query.limit(1)


@built_once
def _candidates(one_client: bool) -> Select[Any]:
    """Per client with queued tasks for the provider: weight, open jobs, on its way, waiting, first rank."""
    queued = (
        select(
            ExternalTask.client_id.label("client_id"),
            func.count().label("waiting"),
            func.min(ExternalTask.dispatch_rank).label("first_rank"),
        )
        .where(ExternalTask.provider == bindparam("provider"), text(QUEUED))
        .group_by(ExternalTask.client_id)
    )
    if one_client:
        queued = queued.where(ExternalTask.client_id == bindparam("client_id"))
    queued_sq = queued.subquery()
    released_q = (
        select(
            ExternalTask.client_id.label("client_id"),
            func.count().label("open_jobs"),
            func.sum(text("CASE WHEN state = 'requested' THEN 1 ELSE 0 END")).label("on_the_way"),
        )
        .where(ExternalTask.provider == bindparam("provider"), text(RELEASED_OPEN))
        .group_by(ExternalTask.client_id)
    )
    if one_client:
        released_q = released_q.where(ExternalTask.client_id == bindparam("client_id"))
    released = released_q.subquery()
    return (
        select(
            queued_sq.c.client_id,
            Client.name,
            Client.weight,
            Client.concurrency_key_limit,
            func.coalesce(released.c.open_jobs, 0).label("open_jobs"),
            func.coalesce(released.c.on_the_way, 0).label("on_the_way"),
            queued_sq.c.waiting,
            queued_sq.c.first_rank,
        )
        .join(Client, Client.id == queued_sq.c.client_id)
        .outerjoin(released, released.c.client_id == queued_sq.c.client_id)
        .order_by(queued_sq.c.first_rank, queued_sq.c.client_id)
    )


@built_once
def _eligible(paged: bool, passing: bool) -> Select[Any]:
    """A page of the client's queued tasks in rank order (id, key, rank, the key's open jobs at the
    vendor), without those whose key is at its limit there, nor (``passing``) those of the keys in
    ``full``, and (``paged``) after the task at ``after_rank``/``after_id``. Plain SQL both
    databases run alike: a NOT IN over the keys at their limit (one pass over the client's open
    tasks, hashed on PostgreSQL) rather than a window function, which ``FOR UPDATE`` forbids; the
    subqueries' bare column names (``RELEASED_OPEN``) are their own table's, the nearest in scope."""
    held = aliased(ExternalTask, name="held")
    at_limit = (
        select(held.concurrency_key)
        .where(
            held.provider == bindparam("provider"),
            held.client_id == bindparam("client_id"),
            held.concurrency_key.is_not(None),
            text(RELEASED_OPEN),
        )
        .group_by(held.concurrency_key)
        .having(func.count() >= bindparam("key_limit"))
    )
    same_key = aliased(ExternalTask, name="same_key")
    open_of_key = (
        select(func.count())
        .select_from(same_key)
        .where(
            same_key.provider == bindparam("provider"),
            same_key.client_id == bindparam("client_id"),
            same_key.concurrency_key == ExternalTask.concurrency_key,
            text(RELEASED_OPEN),
        )
        .scalar_subquery()
    )
    key = ExternalTask.concurrency_key
    query = select(ExternalTask.id, key, ExternalTask.dispatch_rank, open_of_key).where(
        ExternalTask.provider == bindparam("provider"),
        ExternalTask.client_id == bindparam("client_id"),
        text(QUEUED),
        or_(key.is_(None), key.not_in(at_limit)),
    )
    if passing:
        query = query.where(or_(key.is_(None), key.not_in(bindparam("full", expanding=True))))
    if paged:
        after_rank = bindparam("after_rank", type_=ExternalTask.dispatch_rank.type)
        query = query.where(
            or_(
                ExternalTask.dispatch_rank > after_rank,
                and_(ExternalTask.dispatch_rank == after_rank, ExternalTask.id > bindparam("after_id")),
            )
        )
    return (
        query.order_by(ExternalTask.dispatch_rank, ExternalTask.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True, of=ExternalTask)
    )
