"""Consumers' claims: how a consumer takes its outbox row and its task (row locks, re-read under
the lock, the large columns left unread), a relay's row with what its delivery needs to know in
one statement, and the rows a claim reads beside (a disabled endpoint, a channel row's client).
``service.claims`` says what each claim serves; these are its statements.

The claims a job's happy path makes (a submission's record, a relay's start) read their rows as
plain columns and make them the session's objects themselves (``models.store.loaded``): the ORM's
loading of two entities cost more calls than the statement's round trip.

The statements are the same on both databases (SQLite ignores ``FOR UPDATE``: ``BEGIN IMMEDIATE``
serialises its writers already) but for one: on PostgreSQL a submission's record takes its vendor
job's advisory lock, and looks whether tasks are queued behind it, in its claiming statement
(:meth:`PostgresClaims.claim_outbox_and_task`); SQLite takes no lock and leaves the look to the
release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlalchemy import Row, Select, bindparam, select
from sqlalchemy.orm import Session

from models.attention import CallbackEndpoint
from models.client import Client
from models.endpoint_health import EndpointHealth
from models.messages import OutboxMessage
from models.statements import built_once
from models.store.dispatch import queued_behind
from models.store.loaded import CLIENT, OUTBOX_ROW, execute
from models.store.locks import LOCK_KEY
from models.store.outbox import WITHOUT_INPUT, Claimed, claimed_columns, read_claimed
from models.task import ExternalTask

_OUTBOX = OutboxMessage.__table__
_TASKS = ExternalTask.__table__
_CLIENTS = Client.__table__


class RelayRow(NamedTuple):
    """:meth:`Claims.claim_relay`'s row (``service.claims.RelayClaim``): the relay's outbox row,
    locked, with what its delivery needs: the task's own callback URL and its client (None: the task
    is gone), the earlier relay of the task it must wait for (usually none: ``service.ordering``),
    whether the client has any disabled endpoint and any failing one (usually neither: then nothing
    more is read), and the task's traceparent (``core.trace_context``: the callback continues its
    trace)."""

    row: OutboxMessage
    callback_url: str | None
    client: Client | None
    held_by: int | None
    any_disabled: bool
    any_unhealthy: bool
    traceparent: str | None


class Claims:
    """The verbs both databases share."""

    def claim_outbox(self, session: Session, outbox_id: int) -> OutboxMessage | None:
        """The outbox row, locked (``FOR UPDATE``); None when it is gone or done already."""
        row = session.scalar(_claim_statement(), {"outbox_id": outbox_id})
        if row is None or row.done_at is not None:
            return None
        return row

    def claim_outbox_and_task(
        self, session: Session, outbox_id: int, with_input: bool, job_key: int | None, queued_scope: bool | None
    ) -> tuple[Claimed, bool | None] | None:
        """The row and its task, both ``FOR NO KEY UPDATE`` (and the task's input as JSON text when
        ``with_input``); None when the row is gone or done. ``job_key`` (a vendor job's lock key)
        and ``queued_scope`` (``service.dispatch.queued_scope``) are PostgreSQL's: the job's lock
        taken first, and whether tasks are queued behind the task (None where not looked)."""
        found = execute(session, _claim_with_task_statement(with_input), {"outbox_id": outbox_id}).first()
        return _read(session, found, with_input, look=False)

    def lock_task(self, session: Session, task_id: int) -> ExternalTask:
        """The task, row-locked (``FOR NO KEY UPDATE``) and re-read under the lock, its ``input``
        left unread."""
        return session.scalars(_lock_task_statement(), {"task_id": task_id}).one()

    def claim_relay(self, session: Session, outbox_id: int, held_by: Callable[[], Any]) -> RelayRow | None:
        """A relay's row locked, with its task's callback URL and traceparent, its client, the
        earlier relay it waits for (``held_by``: ``service.ordering.held_by``, the subquery that
        finds it) and an ``EXISTS`` each for a disabled and a failing endpoint of the client, in
        one statement of one row; None when the row is gone or done."""
        found = execute(session, _relay_statement(held_by), {"outbox_id": outbox_id}).one_or_none()
        if found is None:
            return None
        n, m = _RELAY_SPLIT
        row = OUTBOX_ROW.one(session, found[:n], populate_existing=True)
        assert row is not None
        if row.done_at is not None:
            return None
        task_url = found[n]
        client = CLIENT.one(session, found[n + 1 : m], populate_existing=True)
        earlier, any_disabled, any_unhealthy, traceparent = found[m:]
        return RelayRow(row, task_url, client, earlier, bool(any_disabled), bool(any_unhealthy), traceparent)

    def disabled_endpoint(self, session: Session, client_id: int, hashed_url: str) -> bool:
        """Is the client's callback URL (its ``url_hash``) disabled? One row of the unique key at most."""
        return session.scalar(_DISABLED, {"client_id": client_id, "url_hash": hashed_url}) is not None

    def client_of_task(self, session: Session, task_id: int) -> tuple[Client | None, str | None]:
        """The task's client and its traceparent; (None, None) when the task is gone."""
        found = session.execute(_client_of_task(), {"task_id": task_id}).first()
        return (found[0], found[1]) if found is not None else (None, None)


class SqliteClaims(Claims):
    """No job lock (``BEGIN IMMEDIATE`` serialised the transaction already), no look for queued
    tasks in the claim: the release looks itself."""


class PostgresClaims(Claims):
    def claim_outbox_and_task(
        self, session: Session, outbox_id: int, with_input: bool, job_key: int | None, queued_scope: bool | None
    ) -> tuple[Claimed, bool | None] | None:
        """With ``job_key``, the job's advisory lock in the claiming statement (a function of the
        SELECT list runs as each row is produced, before ``FOR UPDATE`` locks it), and with a
        ``queued_scope`` the look for tasks queued behind: three round trips in one."""
        if job_key is None:
            return super().claim_outbox_and_task(session, outbox_id, with_input, None, None)
        statement = _claim_with_task_statement(with_input, True, queued_scope)
        found = execute(session, statement, {"outbox_id": outbox_id, "key": job_key}).first()
        return _read(session, found, with_input, look=queued_scope is not None)


def _read(session: Session, found: Row[Any] | None, with_input: bool, look: bool) -> tuple[Claimed, bool | None] | None:
    if found is None:
        return None
    claimed = read_claimed(session, found, with_input)
    if claimed is None:
        return None
    return claimed, (bool(found[-1]) if look else None)


@built_once
def _claim_statement() -> Select[tuple[OutboxMessage]]:
    return select(OutboxMessage).where(OutboxMessage.id == bindparam("outbox_id")).with_for_update()


@built_once
def _claim_with_task_statement(
    with_input: bool, lock_job: bool = False, queued_scope: bool | None = None
) -> Select[Any]:
    columns = claimed_columns(OUTBOX_ROW.columns, with_input)
    if lock_job:
        columns.append(LOCK_KEY)
    if queued_scope is not None:
        columns.append(queued_behind(queued_scope))
    return (
        select(*columns)
        .select_from(_OUTBOX.join(_TASKS, _TASKS.c.id == _OUTBOX.c.task_id))
        .where(_OUTBOX.c.id == bindparam("outbox_id"))
        .with_for_update(of=[_OUTBOX, _TASKS], key_share=True)
    )


@built_once
def _lock_task_statement() -> Select[tuple[ExternalTask]]:
    return (
        select(ExternalTask)
        .options(*WITHOUT_INPUT)
        .where(ExternalTask.id == bindparam("task_id"))
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )


#: where :meth:`Claims.claim_relay`'s row splits: the outbox row's columns, the task's URL, the client's
_RELAY_SPLIT = (len(OUTBOX_ROW.columns), len(OUTBOX_ROW.columns) + 1 + len(CLIENT.columns))


@built_once
def _relay_statement(held_by: Callable[[], Any]) -> Select[Any]:
    """:meth:`Claims.claim_relay`'s statement, built once: constructing it (and its cache key) on
    every call cost more CPU than running it. Each ``EXISTS`` stops at the first row of the
    client's index."""
    disabled = (
        select(CallbackEndpoint.id)
        .where(CallbackEndpoint.client_id == _CLIENTS.c.id, CallbackEndpoint.disabled_at.is_not(None))
        .exists()
    )
    unhealthy = (
        select(EndpointHealth.id).where(EndpointHealth.client_id == _CLIENTS.c.id, EndpointHealth.failures > 0).exists()
    )
    return (
        select(
            *OUTBOX_ROW.columns,
            _TASKS.c.callback_url,
            *CLIENT.columns,
            held_by(),
            disabled,
            unhealthy,
            _TASKS.c.traceparent,
        )
        .select_from(
            _OUTBOX.outerjoin(_TASKS, _TASKS.c.id == _OUTBOX.c.task_id).outerjoin(
                _CLIENTS, _CLIENTS.c.id == _TASKS.c.client_id
            )
        )
        .where(_OUTBOX.c.id == bindparam("outbox_id"))
        .with_for_update(of=_OUTBOX)
    )


_DISABLED = select(CallbackEndpoint.id).where(
    CallbackEndpoint.client_id == bindparam("client_id"),
    CallbackEndpoint.url_hash == bindparam("url_hash"),
    CallbackEndpoint.disabled_at.is_not(None),
)


@built_once
def _client_of_task() -> Select[tuple[Client, str | None]]:
    return (
        select(Client, ExternalTask.traceparent)
        .join(ExternalTask, ExternalTask.client_id == Client.id)
        .where(ExternalTask.id == bindparam("task_id"))
    )
