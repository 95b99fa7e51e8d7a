"""The submit's admission (``service.admission`` decides, ``core.fair_share`` rules): the client's
lock, and its load counted under it — its tasks on their way to the vendor (its window), waiting in
its queue, and every open task of its (its ``max_open_tasks`` cap).

The counts are the same statements on both databases (the task states as the partial indexes'
literal predicates, ``models.task``); only the lock differs: PostgreSQL takes the client's row lock
(and, when a policy decides, the dispatch lock after it, in the same statement), SQLite takes
nothing (``BEGIN IMMEDIATE`` serialises writers already, ``models.store.locks``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Select, and_, bindparam, case, func, select, text
from sqlalchemy.orm import Session

from models.client import Client
from models.statements import built_once
from models.task import OPEN, ExternalTask


class ClientAdmission:
    """The verbs both databases answer: the counts alike, the lock each its own way."""

    def lock_client(self, session: Session, client_id: int, release_key: int | None) -> None:
        """Lock the client for the rest of the transaction, so that its concurrent submits count its
        open tasks one after another; then, when ``release_key`` is given, take that dispatch lock
        (``service.dispatch.release_lock_key``) after it: the order every submit takes them in."""
        raise NotImplementedError

    def count_open(self, session: Session, client_id: int) -> int:
        """Every open task of the client (its ``max_open_tasks`` cap counts them)."""
        return session.scalar(_client_open(), {"client_id": client_id}) or 0

    def queue_load(self, session: Session, provider: str, client_id: int) -> tuple[int, int]:
        """(on its way, waiting) of one client for one provider: its window and its queue."""
        on_the_way, waiting = session.execute(_client_counts(), {"provider": provider, "client_id": client_id}).one()
        return on_the_way, waiting

    def load(self, session: Session, provider: str, client_id: int) -> tuple[int, int, int]:
        """:meth:`queue_load` and :meth:`count_open` in one statement: one scan of the client's open
        tasks (the partial index of those: its requested ones are among them)."""
        params = {"provider": provider, "client_id": client_id}
        on_the_way, waiting, open_tasks = session.execute(_client_load(), params).one()
        return on_the_way, waiting, open_tasks


class PostgresAdmission(ClientAdmission):
    def lock_client(self, session: Session, client_id: int, release_key: int | None) -> None:
        """The row lock (``FOR NO KEY UPDATE``) makes a client's concurrent submits count one after
        another, so the cap is exact: two racing requests cannot both see ``cap - 1``. It costs
        nothing across clients, and task inserts (which only take ``KEY SHARE`` on the client) from
        other transactions do not wait on it. The count cannot go in the locking statement: it would
        read the snapshot taken before the lock was granted (PostgreSQL re-checks only the locked
        row), and miss the task the lock's previous holder just committed."""
        if release_key is None:
            session.execute(_LOCK_CLIENT, {"client_id": client_id})
        else:
            session.execute(_LOCK_CLIENT_THEN_RELEASES, {"client_id": client_id, "key": release_key})


class SqliteAdmission(ClientAdmission):
    def lock_client(self, session: Session, client_id: int, release_key: int | None) -> None:
        """Nothing to take: ``BEGIN IMMEDIATE`` serialised this transaction's writes already (a
        ``SELECT`` here would take no lock, and cost a statement)."""


# --- statements, built once ---------------------------------------------------------------------

_LOCK_CLIENT = select(Client.id).where(Client.id == bindparam("client_id")).with_for_update(key_share=True)
#: the row lock, then the dispatch lock: MATERIALIZED keeps the order (the locked row is produced
#: before the outer SELECT calls the function on it), the order every submit has always taken them in
_LOCKED_CLIENT = _LOCK_CLIENT.cte("locked_client").prefix_with("MATERIALIZED")
_LOCK_CLIENT_THEN_RELEASES = select(func.pg_advisory_xact_lock(bindparam("key", type_=BigInteger))).select_from(
    _LOCKED_CLIENT
)


@built_once
def _client_counts() -> Select[Any]:
    """(on its way, waiting) of one client for one provider: its window and its queue."""
    released = "dispatched_at IS NOT NULL"
    return select(
        func.coalesce(func.sum(text(f"CASE WHEN {released} THEN 1 ELSE 0 END")), 0),
        func.coalesce(func.sum(text(f"CASE WHEN {released} THEN 0 ELSE 1 END")), 0),
    ).where(
        ExternalTask.provider == bindparam("provider"),
        ExternalTask.client_id == bindparam("client_id"),
        text("state = 'requested'"),
    )


@built_once
def _client_load() -> Select[Any]:
    """:func:`_client_counts` and the client's open tasks, in one scan of those (the partial index
    of its open tasks: its requested ones are among them)."""
    requested = and_(ExternalTask.provider == bindparam("provider"), text("state = 'requested'"))
    on_the_way = case((and_(requested, ExternalTask.dispatched_at.is_not(None)), 1), else_=0)
    waiting = case((and_(requested, ExternalTask.dispatched_at.is_(None)), 1), else_=0)
    return select(func.coalesce(func.sum(on_the_way), 0), func.coalesce(func.sum(waiting), 0), func.count()).where(
        ExternalTask.client_id == bindparam("client_id"), text(OPEN)
    )


@built_once
def _client_open() -> Select[Any]:
    return select(func.count()).where(ExternalTask.client_id == bindparam("client_id"), text(OPEN))
