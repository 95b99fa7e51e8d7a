"""Notices to people, dispatched by beat through the outbox: the pending notices turned into outbox
rows (``core.notifications`` decides what goes out, alone or as a digest; ``models.store.notices``
holds the statements).

Dispatch claims pending notices (``SKIP LOCKED``; SQLite's ``BEGIN IMMEDIATE`` serialises it),
writes one outbox row per channel and message, and marks the notices dispatched, in one
transaction; the outbox row's unique ``message_id`` (derived from the message key) is a second
guard behind the notice's own unique key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from core.notifications import CHANNELS, DigestRule, Message, Notice, for_channel, payload, plan, routed
from models.messages import OutboxKind
from models.notifications import DISPATCHED, MUTED, UNROUTED, Notification
from models.store import store_of


@dataclass(frozen=True)
class Routes:
    """Which incident kinds each channel is configured for (None: the channel is off)."""

    email: frozenset[str] | None = None
    chat: frozenset[str] | None = None

    def of(self, channel: str) -> frozenset[str] | None:
        return self.email if channel == "email" else self.chat

    def any(self, kind: str) -> bool:
        return any(routed(kind, self.of(channel)) for channel in CHANNELS)


@dataclass(frozen=True)
class Dispatched:
    messages: int = 0  # outbox rows written (one per channel and message)
    notices: int = 0
    muted: int = 0
    held: int = 0  # pending, gathered for a digest


#: Notices one dispatch reads: far more than a beat batch, so a burst is one digest, not several.
NOTICE_BATCH = 10_000


def dispatch(
    session: Session,
    now: datetime,
    routes: Routes,
    rule: DigestRule,
    batch: int = NOTICE_BATCH,
    console_url: str | None = None,
) -> Dispatched:
    """Turn pending notices into outbox rows, in the caller's transaction.

    One run at a time: on PostgreSQL a run that finds another under way does nothing (a
    transaction-level advisory lock, tried, not waited for). Two runs side by side would each
    take part of a burst (``SKIP LOCKED``) and send it as two digests; SQLite serialises writers."""
    store = store_of(session)
    if not store.locks.try_lock(session, _DISPATCH_KEY):
        return Dispatched()
    rows = store.notices.claim_pending(session, batch)
    if not rows:
        return Dispatched()
    muted_kinds = store.notices.muted_kinds(session)
    muted = 0
    live: list[Notification] = []
    for row in rows:
        if row.kind in muted_kinds:
            store.notices.settle(row, MUTED, now)
            muted += 1
        elif not routes.any(row.kind):
            store.notices.settle(row, UNROUTED, now)  # settled: retention counts from here
        else:
            live.append(row)
    sent_in_window = store.notices.messages_since(session, now - timedelta(seconds=rule.window_s))
    by_id = {row.id: row for row in live}
    messages = plan([_notice(row) for row in live], sent_in_window, now, rule)
    written = 0
    for message in messages:
        written += _outbox(session, message, routes, now, console_url)
        for notice in message.notices:
            store.notices.settle(by_id[notice.id], DISPATCHED, now, message.key)
    sent = sum(len(m.notices) for m in messages)
    return Dispatched(messages=written, notices=sent, muted=muted, held=len(live) - sent)


_DISPATCH_KEY = int.from_bytes(hashlib.blake2b(b"notifications.dispatch", digest_size=8).digest(), "big", signed=True)


def _notice(row: Notification) -> Notice:
    return Notice(row.id, row.key, row.kind, row.subject, row.phase, row.detail, row.occurred_at, row.correlation_id)


def _outbox(session: Session, message: Message, routes: Routes, now: datetime, console_url: str | None) -> int:
    written = 0
    for channel in CHANNELS:
        part = for_channel(message, routes.of(channel))
        if part is None:
            continue
        message_id = hashlib.sha256(f"notify:{channel}:{part.key}".encode()).hexdigest()
        body = payload(channel, part, console_url)
        session.add(store_of(session).outbox.new_row(OutboxKind.NOTIFY, message_id, body, now, target=channel))
        written += 1
    return written
