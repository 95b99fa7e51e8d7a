"""The one publish path: outbox rows go to the broker after their transaction commits, by a hook.

A state change and the work it causes commit together (the outbox). What sends that work on is
this session hook, not the call sites: every new ``OutboxMessage`` flushed in a session is noted
in ``session.info``, and so is an existing row a function re-arms (a replayed dead letter, relays
released by a re-enabled endpoint, a stuck submit re-driven) through :func:`publish_after_commit`.
When the outermost transaction commits, the noted rows that are still in the database are handed
to the publisher the composition root installed (``runtime.outbox.Publisher.publish``); after a
rollback nothing is. A row added in a savepoint that rolled back is left out too.

Every row to be published is stamped ``dispatched_at`` *in its own transaction* (new rows before
their INSERT, re-armed rows when they are named; the stamp, and what a session notes, are the
store's: ``models.store.publication``): the stamp costs no statement or commit of its own, and
it is durable before any worker can take the message, so nothing a worker writes is overwritten by
a late stamp. A row the broker then refuses is un-stamped by the publisher, for the
sweep's grace rule. A process that dies between the commit and the publish leaves a stamped row
that no message carries: the sweep re-publishes it once ``LIAISON_OUTBOX_LEASE_S`` has passed, as it
does for a message the broker lost (docs/runbook.md), or a submit's or relay's start lease.

A submit or relay is stamped its start lease with its publication (``start_lease_until``: the
publication plus what :func:`install` was given for its kind): a message a dead worker took with it
is re-driven when that runs out (``service.start_leases``), long before the outbox lease.

Publishing is best effort by design: whatever the broker does not take, the sweep publishes later,
and consumers are idempotent on the outbox id, so a row published twice is done once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker
from sqlalchemy.orm.attributes import instance_state

from models.base import utcnow
from models.messages import OutboxMessage
from models.store.publication import (
    INSTALLED,
    PENDING,
    START_LEASES,
    forget,
    note,
    pending,
    stamp,
    stamp_new,
    start_lease,
    unsent,
)

__all__ = ["INSTALLED", "PENDING", "START_LEASES", "install", "pending", "publish_after_commit", "stamp", "start_lease"]


def publish_after_commit(session: Session, rows: Iterable[OutboxMessage]) -> None:
    """Publish these existing rows once the session's transaction commits (new rows need not be
    named: the flush notes them). They are stamped dispatched now, in this transaction."""
    rows = list(rows)
    now = utcnow()
    for row in rows:
        stamp(session, row, now)
    note(session, rows)


def _stamp_new_rows(session: Session, _flush_context: Any, _instances: Any) -> None:
    """New rows go out at commit: they are inserted already stamped (no UPDATE of their own)."""
    now = None
    for obj in session.new:
        if isinstance(obj, OutboxMessage) and unsent(obj):
            now = now or utcnow()
            stamp_new(session, obj, now)


def _note_new_rows(session: Session, _flush_context: Any) -> None:
    rows = [obj for obj in session.new if isinstance(obj, OutboxMessage) and obj.parked_reason is None]
    if rows:
        note(session, rows)  # stamped before their INSERT (_stamp_new_rows)


def _end_of_transaction(session: Session, transaction: SessionTransaction) -> None:
    """The outermost transaction ended: committed rows went at commit, rolled-back ones go nowhere.
    (A savepoint's end changes nothing here: its rows are judged at the outer commit.)"""
    if transaction.parent is None:
        forget(session)


def install(
    maker: sessionmaker[Session],
    publish: Callable[[list[OutboxMessage]], object],
    start_leases: Mapping[str, float] | None = None,
) -> None:
    """Publish every committed outbox row of sessions made by ``maker`` (called once, by the root);
    ``start_leases``: seconds of start lease by outbox kind (``Settings.start_leases``)."""

    def _after_commit(session: Session) -> None:
        if session.in_nested_transaction():
            return  # a savepoint released (SQLAlchemy calls this hook then too): the outer commit decides
        # a row parked again after it was noted (held, queued) waits for whatever releases it; read
        # from what is loaded, never loaded now (a claim may load only the columns it publishes).
        # ``instance_state`` is ``inspect``'s answer for a mapped object without its lookups (four
        # Python calls a row: 48 of a happy-path job's, test_statement_budget).
        rows = [
            row
            for row in pending(session)
            if (state := instance_state(row)).persistent and state.dict.get("parked_reason") is None
        ]
        forget(session)
        if rows:
            publish(rows)

    maker.configure(info={**maker.kw.get("info", {}), INSTALLED: True, START_LEASES: dict(start_leases or {})})
    event.listen(maker, "before_flush", _stamp_new_rows)
    event.listen(maker, "after_flush", _note_new_rows)
    event.listen(maker, "after_commit", _after_commit)
    event.listen(maker, "after_transaction_end", _end_of_transaction)
