"""Notices in-process: recorded once with their incident, dispatched once through the outbox,
muted or digested as the rule says."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from sqlalchemy import func, select

from core.notifications import DigestRule
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.notifications import DISPATCHED, MUTED, PENDING, UNROUTED, Notification
from service.dead_letters import dead_letter
from service.incidents import IncidentKind, open_incident, resolve_open
from service.notices import Dispatched, Routes, dispatch
from service.operator_actions import mute_notifications, unmute_notifications, update_incident
from tests.middle.builders import NOW

if TYPE_CHECKING:
    from tests.middle.conftest import Published

EVERYTHING = Routes(email=frozenset({"*"}), chat=frozenset({"*"}))
RULE = DigestRule(threshold=3, window_s=60)


def _open(db: Database, n: int, kind: str = IncidentKind.SUBMIT_FAILED, start: int = 0) -> None:
    with db.transaction() as session:
        for i in range(start, start + n):
            open_incident(session, kind, f"outbox:{i}", f"dead letter {i}", NOW)


def _notices(db: Database) -> list[Notification]:
    with db.transaction() as session:
        return list(session.scalars(select(Notification).order_by(Notification.id)))


def _dispatch(db: Database, routes: Routes = EVERYTHING, now: datetime = NOW) -> Dispatched:
    with db.transaction() as session:
        return dispatch(session, now, routes, RULE)


def test_an_incident_opened_twice_and_resolved_makes_two_notices(db: Database) -> None:
    _open(db, 1)
    _open(db, 1)  # already open: the same incident, no second notice
    with db.transaction() as session:
        resolve_open(session, IncidentKind.SUBMIT_FAILED, "outbox:0", NOW + timedelta(minutes=5), "replayed")
        resolve_open(session, IncidentKind.SUBMIT_FAILED, "outbox:0", NOW + timedelta(minutes=6), "again")
    notices = _notices(db)
    assert [(n.phase, n.state) for n in notices] == [("opened", PENDING), ("resolved", PENDING)]
    assert len({n.key for n in notices}) == 2


def test_dispatch_writes_one_outbox_row_per_channel_and_publishes_it(db: Database, published: Published) -> None:
    _open(db, 2)
    published.forget()
    done = _dispatch(db)
    assert (done.messages, done.notices, done.held) == (4, 2, 0)
    with db.transaction() as session:
        rows = session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.NOTIFY)).all()
        assert sorted(cast(str, r.target) for r in rows) == ["chat", "chat", "email", "email"]  # the channel
        assert set(published.ids) == {r.id for r in rows}
        assert {name for name, _ in published.sent} == {"liaison.notify"}
    assert {n.state for n in _notices(db)} == {DISPATCHED}
    assert _dispatch(db).messages == 0  # a second beat finds nothing left


def test_a_burst_is_one_digest_per_channel(db: Database) -> None:
    _open(db, 40)
    assert _dispatch(db).held == 40  # gathered, not sent
    done = _dispatch(db, now=NOW + timedelta(seconds=60))
    assert (done.messages, done.notices) == (2, 40)
    with db.transaction() as session:
        mail = session.scalars(select(OutboxMessage).where(OutboxMessage.target == "email")).one()
        assert mail.payload["digest"] is True and mail.payload["notices"] == 40
        assert "40 notices" in mail.payload["subject"]


def test_a_channel_gets_only_the_kinds_routed_to_it(db: Database) -> None:
    _open(db, 1, IncidentKind.SUBMIT_FAILED)
    _open(db, 1, IncidentKind.DEADLINE_EXCEEDED, start=1)
    _open(db, 1, IncidentKind.UNKNOWN_JOB, start=2)
    routes = Routes(email=frozenset({"deadline_exceeded"}), chat=frozenset({"submit_failed", "deadline_exceeded"}))
    assert _dispatch(db, routes).messages == 3
    with db.transaction() as session:
        rows = session.execute(select(OutboxMessage.target, OutboxMessage.payload)).all()
    assert sorted((t, p.get("subject") or p["body"]["text"]) for t, p in rows) == [
        ("chat", "[Liaison] incident: deadline_exceeded outbox:1"),
        ("chat", "[Liaison] incident: submit_failed outbox:0"),
        ("email", "[Liaison] incident: deadline_exceeded outbox:1"),
    ]
    assert [n.state for n in _notices(db)] == [DISPATCHED, DISPATCHED, UNROUTED]


def test_a_muted_kind_is_recorded_not_sent_until_unmuted(db: Database, published: Published) -> None:
    _, created = mute_notifications(db, IncidentKind.RELAY_FAILED, NOW, by="alice", note="endpoint migration")
    assert created
    assert mute_notifications(db, IncidentKind.RELAY_FAILED, NOW, by="bob")[0].muted_by == "alice"
    _open(db, 2, IncidentKind.RELAY_FAILED)
    assert _dispatch(db).muted == 2
    unmute_notifications(db, IncidentKind.RELAY_FAILED, NOW)
    _open(db, 1, IncidentKind.RELAY_FAILED, start=5)
    assert _dispatch(db).notices == 1
    assert [n.state for n in _notices(db)] == [MUTED, MUTED, DISPATCHED]


def test_resolving_through_the_operator_action_notifies_the_resolution(db: Database, published: Published) -> None:
    _open(db, 1)
    _dispatch(db)
    with db.transaction() as session:
        (incident_id,) = session.scalars(select(Notification.incident_id)).all()
    assert incident_id is not None
    update_incident(db, incident_id, NOW + timedelta(minutes=1), resolve=True, note="fixed")
    (resolution,) = [n for n in _notices(db) if n.phase == "resolved"]
    assert resolution.state == PENDING and "resolved: fixed" in resolution.detail


def test_a_notice_that_cannot_be_sent_is_an_incident_that_is_never_notified(db: Database) -> None:
    _open(db, 1)
    _dispatch(db)
    with db.transaction() as session:
        rows = {
            r.target: r for r in session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.NOTIFY))
        }
        dead_letter(session, rows["email"], "SMTP 550: recipients refused", "system", NOW)
        dead_letter(
            session, rows["chat"], "never finished a delivery", "system", NOW, poison=True
        )  # not poison_message
    failed = [n for n in _notices(db) if n.kind == IncidentKind.NOTIFICATION_FAILED]
    assert len(failed) == 2
    assert _dispatch(db).messages == 0  # never routed, even to a channel configured for "*"
    assert {n.state for n in _notices(db) if n.kind == IncidentKind.NOTIFICATION_FAILED} == {UNROUTED}
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(OutboxMessage)) == 2
