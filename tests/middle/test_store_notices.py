"""The notices family of the store (``models.store.notices``), one contract on both databases: the
same tests drive each verb on SQLite and on the machine's PostgreSQL (a fresh database for this
module, ``tests/integration/services.py``; that half skips where PostgreSQL is absent, fails under
CI). One class serves both stores: the statements are the same. ``service.notices.dispatch`` (what
goes out) is tested in ``tests/middle/test_notifications.py``."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.notifications import OPENED, RESOLVED, notice_key
from models.db import Database
from models.notifications import DISPATCHED, MUTED, PENDING, UNROUTED, Notification, NotificationMute
from models.store import POSTGRESQL, SQLITE
from models.store.notices import Notices
from tests.middle.builders import NOW
from tests.middle.builders import later as at


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _kind() -> str:
    return f"kind_{uuid.uuid4().hex[:10]}"


def _record(session: Session, db: Database, kind: str, subject: str = "provider sim", phase: str = OPENED) -> None:
    db.store.notices.record(
        session,
        kind=kind,
        subject=subject,
        phase=phase,
        opened_at=NOW,
        occurred_at=at(1),
        detail="the vendor answers 503",
        correlation_id="order-42",
        incident_id=7,
    )


def _notices(db: Database, kind: str) -> list[Notification]:
    with db.transaction() as session:
        rows = list(session.scalars(select(Notification).where(Notification.kind == kind).order_by(Notification.id)))
        session.expunge_all()
        return rows


def _settle_every_pending(db: Database) -> None:
    """Leave no pending notice of earlier tests (the database is the module's)."""
    with db.transaction() as session:
        for notice in db.store.notices.claim_pending(session, 100_000):
            db.store.notices.settle(notice, UNROUTED, NOW)


def test_one_class_serves_both_stores(db: Database) -> None:
    assert isinstance(db.store.notices, Notices)
    assert POSTGRESQL.notices.__class__ is SQLITE.notices.__class__


def test_record_writes_a_notice_once_per_incident_and_phase(db: Database) -> None:
    kind = _kind()
    with db.transaction() as session:
        _record(session, db, kind)
        _record(session, db, kind)  # a retry in the same transaction: nothing more
    with db.transaction() as session:
        _record(session, db, kind)  # a redelivery, later: nothing more
        _record(session, db, kind, phase=RESOLVED)  # the resolution: a notice of its own
    opened, resolved = _notices(db, kind)
    assert (opened.key, opened.phase, opened.state) == (notice_key(kind, "provider sim", NOW, OPENED), OPENED, PENDING)
    assert (opened.occurred_at, opened.detail, opened.correlation_id, opened.incident_id) == (
        at(1),
        "the vendor answers 503",
        "order-42",
        7,
    )
    assert (opened.message_key, opened.dispatched_at) == (None, None)
    assert resolved.key == notice_key(kind, "provider sim", NOW, RESOLVED)


def test_record_keeps_the_subjects_first_2100_characters(db: Database) -> None:
    kind, subject = _kind(), "https://shop.example/" + "x" * 3000
    with db.transaction() as session:
        _record(session, db, kind, subject=subject)
    (notice,) = _notices(db, kind)
    assert notice.subject == subject[:2100]
    assert notice.key == notice_key(kind, subject, NOW, OPENED)  # keyed by the whole subject


def _only_pending(db: Database, count: int) -> str:
    """A new kind's ``count`` notices (subjects s0, s1, …), the only pending ones: the kind."""
    _settle_every_pending(db)
    kind = _kind()
    with db.transaction() as session:
        for n in range(count):
            _record(session, db, kind, subject=f"s{n}")
    return kind


def test_claim_pending_takes_the_oldest_pending_notices_up_to_the_batch(db: Database) -> None:
    first, second, third = _notices(db, _only_pending(db, 3))
    with db.transaction() as session:
        claimed = db.store.notices.claim_pending(session, 2)
        assert [notice.id for notice in claimed] == [first.id, second.id]
        db.store.notices.settle(claimed[0], DISPATCHED, at(5), "message-1")
    with db.transaction() as session:
        assert [notice.id for notice in db.store.notices.claim_pending(session, 10)] == [second.id, third.id]


def test_claim_pending_skips_the_notices_another_dispatch_holds(db: Database) -> None:
    if db.store is SQLITE:
        pytest.skip("SQLite serialises writers: a second dispatch waits for the first (BEGIN IMMEDIATE)")
    first, second, third = _notices(db, _only_pending(db, 3))
    with db.transaction() as session:
        assert [n.id for n in db.store.notices.claim_pending(session, 1)] == [first.id]
        with db.transaction() as other:  # SKIP LOCKED: the first is another run's
            assert [n.id for n in db.store.notices.claim_pending(other, 10)] == [second.id, third.id]


def test_settle_writes_the_state_its_time_and_the_message(db: Database) -> None:
    kind = _only_pending(db, 3)
    with db.transaction() as session:
        sent, muted, unrouted = db.store.notices.claim_pending(session, 10)
        db.store.notices.settle(sent, DISPATCHED, at(5), "message-1")
        db.store.notices.settle(muted, MUTED, at(6))
        db.store.notices.settle(unrouted, UNROUTED, at(7))
    assert [(n.state, n.dispatched_at, n.message_key) for n in _notices(db, kind)] == [
        (DISPATCHED, at(5), "message-1"),
        (MUTED, at(6), None),
        (UNROUTED, at(7), None),
    ]
    with db.transaction() as session:
        assert db.store.notices.claim_pending(session, 10) == []  # settled: none pending


def test_messages_since_counts_the_messages_sent_in_the_window(db: Database) -> None:
    _only_pending(db, 4)
    later = NOW + timedelta(days=365)  # past every other test's settling
    with db.transaction() as session:
        a, b, c, d = db.store.notices.claim_pending(session, 10)
        db.store.notices.settle(a, DISPATCHED, later + timedelta(seconds=1), "digest-1")
        db.store.notices.settle(b, DISPATCHED, later + timedelta(seconds=1), "digest-1")  # one message, two notices
        db.store.notices.settle(c, DISPATCHED, later + timedelta(seconds=3), "single-2")
        db.store.notices.settle(d, MUTED, later + timedelta(seconds=4))  # settled, never sent
    with db.transaction() as session:
        assert db.store.notices.messages_since(session, later) == 2
        assert db.store.notices.messages_since(session, later + timedelta(seconds=1)) == 1  # after, not at
        assert db.store.notices.messages_since(session, later + timedelta(seconds=3)) == 0


def test_mute_keeps_the_first_and_unmute_removes_it(db: Database) -> None:
    kind, other = _kind(), _kind()
    with db.transaction() as session:
        assert db.store.notices.mute(session, kind, "alice", "endpoint migration", at(1))
        assert not db.store.notices.mute(session, kind, "bob", None, at(2))  # muted already: the first is kept
    with db.transaction() as session:
        assert db.store.notices.mute(session, other, "bob", None, at(3))
        assert {kind, other} <= db.store.notices.muted_kinds(session)
        mutes = [m for m in db.store.notices.mutes(session) if m.kind in (kind, other)]
        assert [(m.kind, m.muted_by, m.muted_at, m.note) for m in mutes] == sorted(
            [(kind, "alice", at(1), "endpoint migration"), (other, "bob", at(3), None)]
        )
        kinds = [m.kind for m in db.store.notices.mutes(session)]
        assert kinds == sorted(kinds)
    with db.transaction() as session:
        assert db.store.notices.unmute(session, kind)
    with db.transaction() as session:
        assert not db.store.notices.unmute(session, kind)  # not muted any more
        assert kind not in db.store.notices.muted_kinds(session)
        assert session.get(NotificationMute, kind) is None
        assert other in db.store.notices.muted_kinds(session)
