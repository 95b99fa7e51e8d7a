"""Progress over a channel (issue 22, point 4; ``service.progress``, ``core.coalescing``): a task of a
client on HTTP and a broker channel has two copies of each callback, and a report coalesced into
one must never give its ``message_id`` a second body; a channel-only client hears the newest figure.

The two ways are driven row by row as their workers would: a worker reads a row's body at its start
(counting the delivery, naming a relay's target) and marks it done at its record; each way takes its
rows in order. What each way "received" is what its workers read at their starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from core.states import EventType
from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask
from service.credentials import set_channel
from service.transitions import mark_done
from service.vendor_events import receive_event
from tests.middle.builders import at_vendor, later, new_client, outbox_rows, timeline
from webhooks.events import Progress, VendorEvent
from wire.channel_messages import row_message_id

URL = "https://shop.example/cb"
ACCEPTED = VendorEvent(EventType.ACCEPTED, "job-1")
SUCCEEDED = VendorEvent(EventType.COMPLETED, "job-1", "succeeded", {"result": 42})


def progress(percent: float) -> VendorEvent:
    return VendorEvent(EventType.PROGRESS, "job-1", progress=Progress(percent, f"{percent:g}%"))


@dataclass
class Ways:
    """The HTTP relays and the channel events of one task, as their workers would take them."""

    session: Session
    task: ExternalTask
    url: str | None
    received: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"relay": [], "channel": []})
    started: dict[str, tuple[int, dict[str, Any]] | None] = field(
        default_factory=lambda: {"relay": None, "channel": None}
    )
    clock: float = 10.0
    hooks: int = 0

    def now(self) -> Any:
        self.clock += 1
        return later(self.clock)

    def hook(self, vendor_event: VendorEvent) -> Any:
        self.hooks += 1
        return receive_event(self.session, "sim", f"wh-{self.hooks}", vendor_event, self.now())

    def rows(self, kind: str) -> list[OutboxMessage]:
        return [r for r in outbox_rows(self.session, self.task) if r.kind == kind]

    def start(self, kind: str) -> None:
        """The next row of this way, if no earlier one is on its way: its body is read now."""
        if self.started[kind] is not None:
            return
        row = next((r for r in self.rows(kind) if r.done_at is None), None)
        if row is None:
            return
        row.deliveries += 1
        if kind == OutboxKind.RELAY and self.url is None:
            mark_done(self.session, row, self.now(), "relay.skipped", reason="no callback_url")
            return
        if kind == OutboxKind.RELAY:
            row.target = self.url
            body = dict(row.payload, message_id=row.message_id)
        else:
            body = dict(row.payload)
        self.started[kind] = (row.id, body)

    def finish(self, kind: str) -> None:
        if (started := self.started[kind]) is None:
            return
        row = self.session.get(OutboxMessage, started[0])
        assert row is not None
        mark_done(self.session, row, self.now(), f"{kind}.delivered")
        self.received[kind].append(started[1])
        self.started[kind] = None

    def drain(self) -> None:
        for kind in self.received:
            while self.started[kind] is not None or any(r.done_at is None for r in self.rows(kind)):
                self.start(kind)
                self.finish(kind)

    def heard(self, kind: str) -> list[tuple[str, Any]]:
        return [(b["type"], b.get("percent")) for b in self.received[kind]]


def ways(session: Session, *, url: str | None = URL) -> Ways:
    client = new_client(session, callback_url=url)
    set_channel(client, "redis")
    task = at_vendor(session, client, "order-1", "job-1")
    assert task.channel == "redis"
    return Ways(session, task, url)


def one_body_per_message_id(w: Ways) -> None:
    """Across both ways, what was received and what is stored: a message_id never names two bodies."""
    bodies: dict[str, dict[str, Any]] = {}
    for body in w.received["relay"] + w.received["channel"]:
        assert bodies.setdefault(body["message_id"], body) == body, f"{body['message_id']}: two bodies"
    rows = outbox_rows(w.session, w.task)  # read once, both kinds: this runs after every step
    relays = {r.message_id: dict(r.payload, message_id=r.message_id) for r in rows if r.kind == OutboxKind.RELAY}
    for channel in (r for r in rows if r.kind == OutboxKind.CHANNEL):
        assert channel.message_id == row_message_id(channel.payload["message_id"])
        if (relay := relays.get(channel.payload["message_id"])) is not None:
            assert channel.payload == relay


def in_order(w: Ways) -> None:
    for kind, bodies in w.received.items():
        sequences = [b["sequence"] for b in bodies]
        assert sequences == sorted(set(sequences)), f"{kind}: {sequences}"


def test_reports_coalesced_while_both_copies_wait_reach_both_under_one_message_id(db: Database) -> None:
    with db.transaction() as session:
        w = ways(session)
        w.hook(ACCEPTED)
        first = w.hook(progress(5))
        assert len(first.outbox) == 1
        for percent in (35, 70, 95):
            assert w.hook(progress(percent)).outbox == []  # latest wins, no new callback
        [_, relay] = w.rows(OutboxKind.RELAY)
        [_, channel] = w.rows(OutboxKind.CHANNEL)
        assert channel.payload == dict(relay.payload, message_id=relay.message_id)  # was 5 % on the channel
        assert relay.payload["percent"] == 95.0
        w.hook(SUCCEEDED)
        w.drain()
        assert (
            w.heard("relay")
            == w.heard("channel")
            == [
                ("task.accepted", None),
                ("task.progress", 95.0),
                ("task.completed", None),
            ]
        )
        one_body_per_message_id(w)


def test_the_relay_sent_and_the_channel_event_not(db: Database) -> None:
    """HTTP took the 5 % callback; the channel had not published it yet. The 35 % report is a new
    callback: a new relay, and the waiting channel event becomes its copy (its id and body)."""
    with db.transaction() as session:
        w = ways(session)
        w.hook(progress(5))
        w.start("relay")
        w.finish("relay")
        assert w.hook(progress(35)).outbox  # a new relay: the first one's body is out
        old, new = w.rows(OutboxKind.RELAY)
        [channel] = w.rows(OutboxKind.CHANNEL)
        assert (old.payload["percent"], new.payload["percent"]) == (5.0, 35.0)
        assert (old.sequence, new.sequence) == (1, 2)
        assert channel.message_id == row_message_id(new.message_id)
        assert channel.payload == dict(new.payload, message_id=new.message_id)
        assert w.task.progress_outbox_id == new.id
        kinds = timeline(session, w.task)
        assert kinds.count("event.progress") == 2
        w.drain()
        assert [(b["sequence"], b["percent"]) for b in w.received["relay"]] == [(1, 5.0), (2, 35.0)]
        assert [(b["sequence"], b["percent"]) for b in w.received["channel"]] == [(2, 35.0)]  # 1 went only by HTTP
        one_body_per_message_id(w)


def test_the_channel_event_sent_and_the_relay_not(db: Database) -> None:
    """The channel published the 5 % event; HTTP is slow, its relay still waits. The 35 % report is a
    new callback: the waiting relay takes it (a new message_id, the next sequence), the channel gets a
    new event for it; the 5 % message_id keeps its 5 % body."""
    with db.transaction() as session:
        w = ways(session)
        w.hook(progress(5))
        [relay] = w.rows(OutboxKind.RELAY)
        first_id = relay.message_id
        w.start("channel")
        assert w.hook(progress(35)).outbox == []  # the relay took it in: no new relay
        assert (relay.sequence, relay.payload["sequence"], relay.payload["percent"]) == (2, 2, 35.0)
        assert relay.message_id != first_id and w.task.relay_seq == 2
        w.finish("channel")
        for percent in (70, 95):  # the channel keeps up, HTTP does not
            w.start("channel")
            w.finish("channel")
            w.hook(progress(percent))
        [relay] = w.rows(OutboxKind.RELAY)
        assert (relay.sequence, relay.payload["percent"]) == (4, 95.0)
        events = w.rows(OutboxKind.CHANNEL)
        assert [e.payload["percent"] for e in events] == [5.0, 35.0, 70.0, 95.0]
        assert events[-1].payload == dict(relay.payload, message_id=relay.message_id)
        detail = [e.detail for e in w.task.events if e.kind == "event.progress"]
        assert detail[1]["replaces"] == first_id and detail[1]["coalesced"] is True
        w.drain()
        assert [(b["sequence"], b["percent"]) for b in w.received["relay"]] == [(4, 95.0)]
        assert [b["sequence"] for b in w.received["channel"]] == [1, 2, 3, 4]
        one_body_per_message_id(w)


def test_a_channel_only_client_hears_the_newest_figure(db: Database) -> None:
    """No callback URL: its HTTP relays are skipped, sending nothing, and are no copy that holds a
    body. Reports coalesce into the waiting channel event, even once its relay was skipped."""
    with db.transaction() as session:
        w = ways(session, url=None)
        w.hook(ACCEPTED)
        w.drain()
        w.hook(progress(5))
        w.hook(progress(35))  # both copies wait: in place
        w.start("relay")  # skipped: done, nothing sent
        before = len(outbox_rows(session, w.task))
        for percent in (40, 70, 95):
            assert w.hook(progress(percent)).outbox == []
        assert len(outbox_rows(session, w.task)) == before  # coalesced into the channel event
        w.hook(SUCCEEDED)
        w.drain()
        assert w.received["relay"] == []
        assert w.heard("channel") == [("task.accepted", None), ("task.progress", 95.0), ("task.completed", None)]
        one_body_per_message_id(w)


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("url", [URL, None], ids=["http-and-channel", "channel-only"])
def test_any_pace_of_either_way_keeps_one_body_per_message_id(db: Database, seed: int, url: str | None) -> None:
    """Reports, starts and records in an order drawn from ``seed``: then both ways drain. Each way's
    numbers only grow, every message_id has one body, and each way's last progress is the newest."""
    rng = random.Random(seed)
    with db.transaction() as session:
        w = ways(session, url=url)
        w.hook(ACCEPTED)
        figure = 0
        for _ in range(40):
            step = rng.choice(["report", "report", "start", "finish"])
            if step == "report":
                figure += 1
                w.hook(progress(figure))
            else:
                kind = rng.choice([OutboxKind.RELAY, OutboxKind.CHANNEL])
                w.start(kind) if step == "start" else w.finish(kind)
            one_body_per_message_id(w)
        w.hook(SUCCEEDED)
        w.drain()
        one_body_per_message_id(w)
        in_order(w)
        for kind in ([OutboxKind.RELAY] if url else []) + [OutboxKind.CHANNEL]:
            heard = [p for t, p in w.heard(kind) if t == "task.progress"]
            assert heard and heard[-1] == figure, (kind, heard)
            assert w.heard(kind)[-1] == ("task.completed", None)


def _statements(db: Database, run: Any) -> list[str]:
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        run()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    return seen


@pytest.mark.parametrize("channel", [None, "redis"])
def test_a_coalesced_report_costs_a_client_on_http_alone_nothing_more(db: Database, channel: str | None) -> None:
    """On HTTP alone the channel event is never looked for: the statements are those of before; a
    task on a channel reads its channel event too (one SELECT)."""
    with db.transaction() as session:
        client = new_client(session)
        set_channel(client, channel)
        task = at_vendor(session, client, "order-1", "job-1")
        task_id = task.id
        receive_event(session, "sim", "wh-1", progress(5), later(1))

    def coalesce() -> None:
        with db.transaction() as session:
            assert receive_event(session, "sim", "wh-2", progress(35), later(2)).outbox == []

    statements = _statements(db, coalesce)
    with db.transaction() as session:
        rows = session.scalars(select(OutboxMessage).where(OutboxMessage.task_id == task_id)).all()
        assert all(r.payload["percent"] == 35.0 for r in rows if r.kind != OutboxKind.SUBMIT)
    if channel is None:
        assert statements == HTTP_ALONE  # what it was before channels were looked at
    else:
        assert statements.count("SELECT") == HTTP_ALONE.count("SELECT") + 1, statements
        assert len(statements) == len(HTTP_ALONE) + 1


#: a coalesced report on HTTP alone, as measured before issue 22 (the inbox row, the task's lock,
#: its latest progress relay, the timeline event, and the relay's and the task's changes at commit)
HTTP_ALONE = ["BEGIN", "INSERT", "SELECT", "UPDATE", "SELECT", "INSERT", "UPDATE"]
