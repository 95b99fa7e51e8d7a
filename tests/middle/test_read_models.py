"""The read models (``models/read_models``) on both databases: each view's main read runs on SQLite
and on PostgreSQL over the same rows and gives the same answer, so the fast tier runs the
statements production runs. PostgreSQL is the machine's (a fresh database for this module,
``tests/integration/services.py``), as in ``tests/middle/test_store_contract.py``; where it is
absent its half skips (and fails under CI, which must start it).

One set of rows (``world``) is written once per database; every test only reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, timedelta

import pytest

from models import audit
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.client import ApiKey, Client
from models.db import Database
from models.endpoint_health import EndpointHealth, origin_hash
from models.messages import DeadLetter, OutboxKind, OutboxMessage
from models.read_models import console_pages, gauge_counts, lists, overview, task_page
from models.store import SQLITE
from models.task import ExternalTask, TaskEvent
from tests.middle.builders import NOW, add_outbox_row, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


@dataclass(frozen=True)
class World:
    """The ids of the rows every test reads."""

    client: int
    ok: int  # succeeded, its relay failing: retrying by its callback
    retry: int  # submitted, its submit failing: retrying at the vendor
    failed: int  # failed by the vendor, its outcome saying why
    queued: int  # requested, waiting for its turn
    polled: int  # accepted, a poll scheduled
    relay_failing: int
    submit_failing: int
    letter_open: int
    letter_closed: int
    letter_poison: int
    incident_outbox: int
    incident_deadline: int
    incident_other: int
    orphan_open: int
    endpoint: int
    health: int


@pytest.fixture(scope="module")
def world(db: Database) -> World:
    with db.transaction() as session:
        client = Client(name="acme", callback_secrets=["s"], callback_url="https://a.example/cb")
        session.add(client)
        session.flush()
        session.add_all(
            [
                ApiKey(client_id=client.id, key_hash="a" * 64),
                ApiKey(client_id=client.id, key_hash="b" * 64, retired_at=NOW),
            ]
        )

        def task(correlation_id: str, state: str, provider: str = "sim", **columns: object) -> ExternalTask:
            return add_task(
                session,
                client,
                correlation_id=correlation_id,
                provider=provider,
                state=state,
                input={"a": 1},
                **columns,
            )

        ok = task("ok", "succeeded", dispatched_at=NOW - timedelta(hours=1))
        retry = task(
            "retry",
            "submitted",
            dispatched_at=NOW - timedelta(hours=1),
            next_attempt_at=NOW + timedelta(minutes=1),
            last_error="boom",
        )
        failed = task("failed", "failed", "vend", outcome={"error": "card declined"}, dispatched_at=NOW)
        queued = task("queued", "requested")
        polled = task("polled", "accepted", "vend", dispatched_at=NOW, poll_due_at=NOW + timedelta(minutes=5))

        def outbox(task: ExternalTask, kind: str, **columns: object) -> OutboxMessage:
            message_id = f"msg_{task.correlation_id}_{kind}_{len(columns)}"
            hour_ago = NOW - timedelta(hours=1)
            return add_outbox_row(
                session, task, kind, message_id=message_id, payload={"type": kind}, created_at=hour_ago, **columns
            )

        relay_failing = outbox(
            ok,
            OutboxKind.RELAY,
            attempts=1,
            dispatched_at=NOW - timedelta(minutes=10),
            next_attempt_at=NOW + timedelta(minutes=1),
        )
        submit_failing = outbox(
            retry,
            OutboxKind.SUBMIT,
            attempts=1,
            dispatched_at=NOW - timedelta(hours=1),
            next_attempt_at=NOW + timedelta(minutes=1),
        )
        outbox(ok, OutboxKind.SUBMIT, dispatched_at=NOW - timedelta(hours=1), done_at=NOW - timedelta(seconds=30))
        outbox(failed, OutboxKind.RELAY, dispatched_at=NOW - timedelta(minutes=10))  # out at the broker, waiting

        session.add_all(
            [
                TaskEvent(task_id=retry.id, at=NOW - timedelta(hours=1), kind="state.submitted"),
                TaskEvent(task_id=retry.id, at=NOW - timedelta(minutes=3), kind="submit.attempt_failed"),
                TaskEvent(task_id=ok.id, at=NOW - timedelta(minutes=2), kind="state.succeeded"),
                TaskEvent(task_id=failed.id, at=NOW - timedelta(minutes=1), kind="state.failed"),
            ]
        )

        def letter(kind: str, fault: str, outbox_id: int | None, **columns: object) -> DeadLetter:
            row = DeadLetter(
                kind=kind,
                fault=fault,
                message_id=f"m_{kind}",
                outbox_id=outbox_id,
                provider="sim",
                payload={"kind": kind},
                error="gone",
                **columns,
            )
            session.add(row)
            session.flush()
            return row

        letter_open = letter("relay", "caller", relay_failing.id, last_failed_at=NOW - timedelta(hours=2))
        letter_closed = letter(
            "submit", "system", submit_failing.id, last_failed_at=NOW - timedelta(hours=2), state="discarded"
        )
        letter_poison = letter("poison", "system", None, last_failed_at=NOW - timedelta(minutes=10))
        audit.record(session, "dead_letter", letter_open.id, "replay", "ops", NOW)

        incident_outbox = Incident(
            kind="dead_letter", subject=f"outbox:{relay_failing.id}", correlation_id="ok", detail="d"
        )
        incident_deadline = Incident(
            kind="execution_deadline",
            subject=f"execution:task:{failed.id}",
            correlation_id="failed",
            detail="d",
            resolved_at=NOW,
        )
        incident_other = Incident(kind="orphan", subject="orphan:7", detail="d")
        orphan_open = OrphanEvent(source="sim", message_id="o1", vendor_job_id="j1", payload={"job": "j1"})
        orphan_done = OrphanEvent(source="sim", message_id="o2", vendor_job_id="j2", payload={}, state="resolved")
        endpoint = CallbackEndpoint(client_id=client.id, url_hash="h", url="https://b.example/cb", disabled_at=NOW)
        health = EndpointHealth(
            client_id=client.id,
            origin="https://a.example",
            origin_hash=origin_hash("https://a.example"),
            failures=2,
            paused_until=NOW + timedelta(minutes=5),
        )
        session.add_all(
            [incident_outbox, incident_deadline, incident_other, orphan_open, orphan_done, endpoint, health]
        )
        session.flush()
        return World(
            client=client.id,
            ok=ok.id,
            retry=retry.id,
            failed=failed.id,
            queued=queued.id,
            polled=polled.id,
            relay_failing=relay_failing.id,
            submit_failing=submit_failing.id,
            letter_open=letter_open.id,
            letter_closed=letter_closed.id,
            letter_poison=letter_poison.id,
            incident_outbox=incident_outbox.id,
            incident_deadline=incident_deadline.id,
            incident_other=incident_other.id,
            orphan_open=orphan_open.id,
            endpoint=endpoint.id,
            health=health.id,
        )


# --- lists ---------------------------------------------------------------------------------------


def test_lists(db: Database, world: World):
    with db.transaction() as session:
        retrying = lists.operator_tasks(session, lists.TaskFilter(retrying=True), 10)
        assert [t.id for t in retrying] == [world.retry, world.ok]  # newest first; a failing callback counts
        assert lists.callbacks_failing_of(session, [world.ok, world.retry, world.failed]) == {world.ok}
        assert [t.id for t in lists.retrying_tasks(session, 10)] == [world.ok, world.retry]
        assert [t.id for t in lists.newest_tasks(session, 10, client_id=world.client, state="failed")] == [world.failed]
        assert [t.id for t in lists.newest_tasks(session, 2, with_client=True)] == [world.polled, world.queued]

        letters = lists.dead_letters(session, lists.DeadLetterFilter(), NOW, 10)
        assert [d.id for d in letters] == [world.letter_open, world.letter_poison]
        older = lists.DeadLetterFilter(older_than_s=3600)
        assert [d.id for d in lists.dead_letters(session, older, NOW, 10)] == [world.letter_open]
        assert [
            d.id for d in lists.dead_letters(session, lists.DeadLetterFilter(state=None), NOW, 10, world.letter_open)
        ] == [
            world.letter_closed,
            world.letter_poison,
        ]
        assert [i.id for i in lists.incidents(session, "open", None, 10)] == [
            world.incident_outbox,
            world.incident_other,
        ]
        assert [i.id for i in lists.incidents(session, "resolved", None, 10)] == [world.incident_deadline]
        assert [o.id for o in lists.orphans(session, "open", 10)] == [world.orphan_open]
        assert [e.id for e in lists.disabled_endpoints(session)] == [world.endpoint]

        assert [e.kind for e in lists.task_events(session, world.retry, 1)] == ["state.submitted"]
        assert [r.id for r in lists.task_outbox(session, world.retry)] == [world.submit_failing]
        assert [d.id for d in lists.task_dead_letters(session, world.ok)] == [world.letter_open]
        ok = session.get(ExternalTask, world.ok)
        assert ok is not None
        outbox_ids = [r.id for r in lists.task_outbox(session, world.ok)]
        assert [i.id for i in lists.task_incidents(session, ok, outbox_ids)] == [world.incident_outbox]


# --- the overview --------------------------------------------------------------------------------


def test_overview(db: Database, world: World):
    with db.transaction() as session:
        counts = overview.task_counts(session, ["sim", "vend"])
        assert not counts.estimated
        assert {cell: count.value for cell, count in counts.cells.items()} == {
            ("succeeded", "sim"): 1,
            ("submitted", "sim"): 1,
            ("failed", "vend"): 1,
            ("requested", "sim"): 1,
            ("accepted", "vend"): 1,
        }
        assert overview.retrying_count(session) == 2
        assert {(b.kind, b.pending) for b in overview.outbox_backlog(session)} == {("relay", 2), ("submit", 1)}
        assert overview.open_dead_letters(session) == {("relay", "caller"): 1, ("poison", "system"): 1}
        assert overview.open_incidents(session) == {"dead_letter": 1, "orphan": 1}
        assert overview.open_orphans(session) == 1
        assert overview.paused_endpoints(session) == 1
        assert overview.disabled_endpoints(session) == 1

        minutes = overview.finished_per_minute(session, NOW)
        assert len(minutes) == 60 and minutes[-1].start == NOW
        assert [(m.start, m.succeeded, m.failed) for m in minutes if m.succeeded or m.failed] == [
            (NOW - timedelta(minutes=2), 1, 0),
            (NOW - timedelta(minutes=1), 0, 1),
        ]

        activity = overview.worker_activity(session, NOW)
        assert activity.since_done_s(NOW) == 30.0
        assert activity.waiting_s(NOW) == 600.0  # the relay out at the broker; the failing ones wait their time
        assert not activity.stalled(NOW)  # a message finished 30 s ago


def test_the_overview_estimates_finished_tasks_above_its_threshold(db: Database, world: World):
    """Above the threshold, finished tasks are the planner's estimate on PostgreSQL (never read), and
    counted on SQLite (where every count is exact); open tasks are counted on both."""
    with db.transaction() as session:
        counts = overview.task_counts(session, ["sim", "vend"], estimate_above=0)
        assert counts.estimated
        assert counts.get("submitted", "sim") == overview.Count(1)
        finished = {cell: count for cell, count in counts.cells.items() if cell[0] in overview.FINISHED_STATES}
        assert len(finished) == len(overview.FINISHED_STATES) * 2
        assert all(count.estimated and count.value >= 0 for count in finished.values())
        if db.store is SQLITE:
            assert {cell: c.value for cell, c in finished.items() if c.value} == {
                ("succeeded", "sim"): 1,
                ("failed", "vend"): 1,
            }


def test_expected_rows(db: Database, world: World):
    query = "SELECT 1 FROM external_tasks WHERE provider = :provider"
    with db.transaction() as session:
        expected = db.store.reads.expected_rows(session, query, {"provider": "vend"})
        assert isinstance(expected, int) and expected >= 0
        if db.store is SQLITE:
            assert expected == 2  # counted


# --- the console's pages -------------------------------------------------------------------------


def test_console_pages(db: Database, world: World):
    with db.transaction() as session:
        page = console_pages.dead_letter_page(session, world.letter_open)
        assert page is not None
        assert page.task_id == world.ok
        assert page.payload_text is not None and json.loads(page.payload_text) == {"kind": "relay"}
        assert [e.action for e in page.history] == ["replay"]
        assert console_pages.dead_letter_page(session, 10**9) is None

        letters = [session.get(DeadLetter, i) for i in (world.letter_open, world.letter_closed, world.letter_poison)]
        assert console_pages.letter_tasks(session, [d for d in letters if d is not None]) == {
            world.letter_open: world.ok,
            world.letter_closed: world.retry,
        }
        assert console_pages.open_matching(session, lists.DeadLetterFilter(state=None, kind="relay"), NOW) == 1

        incidents = lists.incidents(session, "all", None, 10)
        assert console_pages.incident_tasks(session, incidents) == {
            world.incident_outbox: world.ok,
            world.incident_deadline: world.failed,
        }
        incident = console_pages.incident_page(session, world.incident_outbox)
        assert incident is not None and incident.history == []

        orphan = console_pages.orphan_page(session, world.orphan_open)
        assert orphan is not None and orphan.payload_text is not None
        assert json.loads(orphan.payload_text) == {"job": "j1"}

        endpoints = console_pages.endpoints_page(session)
        assert [e.id for e in endpoints.disabled] == [world.endpoint]
        assert [h.id for h in endpoints.unhealthy] == [world.health]
        assert endpoints.history == {world.endpoint: []}

        [row] = console_pages.client_rows(session)
        assert (row.name, row.callback_url, row.secrets, row.keys, row.origins) == (
            "acme",
            "https://a.example/cb",
            1,
            1,  # the retired key is not counted
            0,
        )


# --- a task's page -------------------------------------------------------------------------------


def test_task_page(db: Database, world: World):
    with db.transaction() as session:
        ok = task_page.task_page(session, world.ok, NOW, timeline_limit=10)
        assert ok is not None
        assert [e.kind for e in ok.events] == ["state.succeeded"] and ok.total_events == 1
        assert [r.id for r in ok.callbacks_retrying] == [world.relay_failing] and ok.retrying == []
        assert [d.id for d in ok.letters] == [world.letter_open]
        assert [i.id for i in ok.incidents] == [world.incident_outbox]
        assert ok.paused is not None and ok.paused.id == world.health
        assert ok.callbacks == task_page.CallbackTarget("https://a.example/cb", "client", None)
        assert ok.error_source is None
        assert ok.input_text is not None and json.loads(ok.input_text) == {"a": 1}

        retry = task_page.task_page(session, world.retry, NOW, timeline_limit=1)
        assert retry is not None
        assert [e.kind for e in retry.events] == ["submit.attempt_failed"] and retry.total_events == 2
        assert [r.id for r in retry.retrying] == [world.submit_failing] and retry.callbacks_retrying == []
        assert retry.error_source == "vendor"
        assert task_page.open_task_dead_letters(session, world.retry) == []  # its one letter was discarded

        failed = task_page.task_page(session, world.failed, NOW, timeline_limit=10)
        assert failed is not None and failed.outcome_text is not None
        assert json.loads(failed.outcome_text) == {"error": "card declined"}  # as stored: the view decodes it

        assert task_page.task_page(session, 10**9, NOW, timeline_limit=10) is None
        assert [t.id for t in task_page.tasks_named(session, "failed", None, 2)] == [world.failed]


# --- the gauges' scrape --------------------------------------------------------------------------


def test_gauge_counts(db: Database, world: World):
    with db.engine.connect() as conn, conn.begin():
        gauge_counts.limit_statements(conn, 1500)
        counts = gauge_counts.read_counts(conn)
    assert sorted(counts.tasks) == [
        ("accepted", "vend", 1),
        ("failed", "vend", 1),
        ("requested", "sim", 1),
        ("submitted", "sim", 1),
        ("succeeded", "sim", 1),
    ]
    assert sorted(counts.dead_letters_open) == [("poison", "system", 1), ("relay", "caller", 1)]
    assert sorted(counts.incidents_open) == [("dead_letter", 1), ("orphan", 1)]
    assert counts.orphans_open == 1
    assert sorted((kind, n) for kind, n, _ in counts.outbox_pending) == [("relay", 2), ("submit", 1)]
    assert [(provider, client, n) for provider, client, n, _ in counts.queued] == [("sim", "acme", 1)]
    assert [failures for failures, _, _ in counts.unhealthy] == [2]
    [(provider, due)] = counts.poll_due
    assert provider == "vend" and due.replace(tzinfo=due.tzinfo or UTC) == NOW + timedelta(minutes=5)
