"""The console shows reasons (issue 43, point 7): a vendor's failure reason where "last error"
stood empty, the vendor's answer with a dead letter, caller-fault letters replayed only with a
warning and without an incident each, ages with units, one timestamp format, incidents linked to
their task, and beat's and the workers' liveness on the overview. In-process, like test_console."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from core.classify import Fault
from core.endpoint_health import HealthPolicy
from core.states import EventType
from models.attention import Incident
from models.base import utcnow
from models.messages import DeadLetter
from models.store import store_of
from models.store.heartbeats import record_tick
from models.task import ExternalTask
from service.dead_letters import dead_letter
from service.vendor_events import receive_event
from tests.middle.builders import at_vendor, new_client, submit
from tests.middle.test_console import TOKEN, _ctx, app, browser, module_app, signed_in  # noqa: F401 (fixtures)
from webhooks.events import VendorEvent

ISO_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_a_task_the_vendor_failed_shows_the_vendors_reason_as_its_last_error(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _ = signed_in
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        failed = at_vendor(session, shop, "order-declined", now=now)
        nested = at_vendor(session, shop, "order-nested", job_id="job-nested", now=now)
        session.flush()
        outcome = {"error": "card declined: insufficient funds", "code": 51}
        receive_event(
            session, "sim", "m-1", VendorEvent(EventType.COMPLETED, "job-order-declined", "failed", outcome), now
        )
        receive_event(
            session,
            "sim",
            "m-2",
            VendorEvent(EventType.COMPLETED, "job-nested", "failed", {"error": {"message": "x" * 2000}}),
            now,
        )
        ids = {"failed": failed.id, "nested": nested.id}
    page = client.get(f"/console/tasks/{ids['failed']}").text
    assert '<dt id="last-error-label">vendor\'s failure reason</dt>' in page
    assert re.search(r'id="last-error">card declined: insufficient funds</dd>', page)
    bounded = client.get(f"/console/tasks/{ids['nested']}").text
    shown = re.search(r'id="last-error">([^<]*)</dd>', bounded)
    assert shown and shown[1].startswith("xxx") and len(shown[1]) == 500 and shown[1].endswith("…")


def test_one_timestamp_format_and_ages_with_units(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _ = signed_in
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop", callback_url="https://slow.example/cb")
        task = submit(session, shop, "order-paused", now=now - timedelta(hours=3)).task
        for _ in range(HealthPolicy().failures_to_pause):
            store_of(session).endpoint_health.record_failure(
                session, shop.id, "https://slow.example", "read timeout", now, HealthPolicy()
            )
        session.flush()
        task_id = task.id
    page = client.get(f"/console/tasks/{task_id}").text
    until = re.search(r"\(until ([^)]*)\)", page)
    assert until and ISO_Z.fullmatch(until[1]), until
    assert " UTC<" not in page and "+00:00" not in page
    overview = client.get("/console/").text
    backlog = overview.split('id="outbox"', 1)[1].split("</section>", 1)[0]
    assert re.search(r'class="num">3\.0 h</td>', backlog), backlog
    assert re.search(r"As of " + ISO_Z.pattern, overview)


def test_the_incident_list_links_each_incident_to_its_task(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _ = signed_in
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        dead = submit(session, shop, "order-dead", now=now)
        dead_letter(session, dead.outbox[0], "vendor down for good", Fault.SYSTEM, now)
        session.flush()
        task_id = dead.task.id
        assert session.scalars(select(Incident.kind)).all() == ["submit_failed"]
    page = client.get("/console/incidents").text
    assert f'<a class="task-link" href="/console/tasks/{task_id}">order-dead</a>' in page


def _two_letters(app: Flask) -> dict[str, int]:  # noqa: F811
    """A submit the vendor refused as the caller's (with its answer kept) and one it failed on."""
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        refused = submit(session, shop, "order-refused", now=now)
        answer = '{"title": "Job rejected", "detail": "amount <b>must</b> be positive"}'
        dead_letter(session, refused.outbox[0], "POST vendor:443: HTTP 422", Fault.CALLER, now, answer=answer)
        down = submit(session, shop, "order-down", now=now)
        dead_letter(session, down.outbox[0], "POST vendor:443: HTTP 503", Fault.SYSTEM, now)
        session.flush()
        letters = dict(session.execute(select(DeadLetter.fault, DeadLetter.id)).tuples().all())
        incidents = session.scalars(select(Incident.correlation_id)).all()
    assert incidents == ["order-down"]  # the caller's fault opened none
    return {"caller": letters["caller"], "system": letters["system"]}


def test_a_dead_letter_shows_what_the_vendor_answered(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _ = signed_in
    letters = _two_letters(app)
    page = client.get(f"/console/dead-letters/{letters['caller']}").text
    assert "HTTP 422" in page
    shown = "{&#34;title&#34;: &#34;Job rejected&#34;, &#34;detail&#34;: &#34;amount &lt;b&gt;must"
    assert f'<pre id="answer-text">{shown}' in page
    listed = client.get("/console/dead-letters").text
    assert "amount &lt;b&gt;must&lt;/b&gt; be positive" in listed
    admin: Any = client.application.test_client().get(
        f"/admin/v1/dead-letters/{letters['caller']}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert "amount <b>must</b> be positive" in admin.json["answer"]
    assert 'id="answer-text">None kept' in client.get(f"/console/dead-letters/{letters['system']}").text


def test_a_caller_fault_letter_is_replayed_only_behind_a_warning(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, csrf = signed_in
    letters = _two_letters(app)
    caller_page = client.get(f"/console/dead-letters/{letters['caller']}").text
    assert 'id="replay"' not in caller_page  # no prominent button
    assert 'id="caller-fault"' in caller_page and 'class="quiet" id="replay-anyway"' in caller_page
    assert 'id="replay"' in client.get(f"/console/dead-letters/{letters['system']}").text
    listed = client.get("/console/dead-letters").text
    assert listed.count("replay anyway…") == 1 and listed.count(">replay…<") == 1
    confirm = client.get(f"/console/dead-letters/{letters['caller']}/replay").text
    assert 'id="caution"' in confirm and "the caller&#39;s fault" in confirm and "Job rejected" in confirm
    assert 'id="caution"' not in client.get(f"/console/dead-letters/{letters['system']}/replay").text
    with _ctx(app).db.transaction() as session:
        task_of = dict(
            session.execute(
                select(DeadLetter.fault, ExternalTask.id).join(
                    ExternalTask, ExternalTask.correlation_id == DeadLetter.correlation_id
                )
            )
            .tuples()
            .all()
        )
    assert "the caller&#39;s fault" in client.get(f"/console/tasks/{task_of['caller']}/replay").text
    assert 'id="caution"' not in client.get(f"/console/tasks/{task_of['system']}/replay").text

    # replaying every match leaves the caller's letters open, and says so with their count
    everything = client.get("/console/dead-letters/replay").text
    assert "1 now" in everything and "1 of them are the caller&#39;s fault and are left open" in everything
    response = client.post("/console/dead-letters/replay", data={"csrf_token": csrf})
    assert response.status_code == 302 and "replayed=1" in response.location
    with _ctx(app).db.transaction() as session:
        states = dict(session.execute(select(DeadLetter.fault, DeadLetter.state)).tuples().all())
    assert states == {"caller": "open", "system": "replayed"}
    # only a filter naming fault=caller takes them, behind the quiet link and a warning that counts them
    assert 'class="quiet" id="replay-matching"' in client.get("/console/dead-letters?fault=caller").text
    chosen = client.get("/console/dead-letters/replay?fault=caller").text
    assert "1 now" in chosen and "1 of them are the caller&#39;s fault: the vendor" in chosen
    response = client.post("/console/dead-letters/replay", data={"fault": "caller", "csrf_token": csrf})
    assert "replayed=1" in response.location


def test_the_admin_apis_bulk_replay_counts_the_callers_letters_and_leaves_them_unless_asked(
    app: Flask,  # noqa: F811
) -> None:
    letters = _two_letters(app)
    admin = app.test_client()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    broad: Any = admin.post("/admin/v1/dead-letters/replay", json={}, headers=headers).json
    assert broad["replayed"] == 1 and broad["caller_fault"] == 1 and broad["caller_fault_replayed"] is False
    assert "refused again" in broad["warning"]
    chosen: Any = admin.post("/admin/v1/dead-letters/replay", json={"fault": "caller"}, headers=headers).json
    assert (chosen["replayed"], chosen["caller_fault"], chosen["caller_fault_replayed"]) == (1, 1, True)
    single: Any = admin.get(f"/admin/v1/dead-letters/{letters['caller']}", headers=headers).json
    assert single["state"] == "replayed"


def test_the_overview_shows_beat_and_worker_liveness(
    app: Flask,  # noqa: F811
    signed_in: tuple[FlaskClient, str],  # noqa: F811
) -> None:
    client, _ = signed_in
    never = client.get("/console/").text
    assert "beat has never ticked" in never and 'id="worker-liveness"' in never
    assert "last finished a message never" in never and "none published is waiting" in never
    now = utcnow()
    record_tick(_ctx(app).db, now - timedelta(seconds=30), 10.0, "host:1")
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        row = submit(session, shop, "order-stuck", now=now - timedelta(hours=1)).outbox[0]
        row.dispatched_at = now - timedelta(minutes=20)
        done = submit(session, shop, "order-finished", now=now - timedelta(hours=1)).outbox[0]
        done.dispatched_at, done.done_at = now - timedelta(minutes=40), now - timedelta(minutes=30)
    page = client.get("/console/").text
    beat = page.split('id="beat-liveness">', 1)[1].split("</li>", 1)[0]
    assert re.search(r"beat <strong>stale</strong>: last tick 3\d\.\d s ago", beat), beat
    workers = page.split('id="worker-liveness">', 1)[1].split("</li>", 1)[0]
    assert "<strong>not taking work</strong>" in workers and "30.0 min ago" in workers, workers
    assert "waits 20.0 min" in workers
    record_tick(_ctx(app).db, utcnow(), 10.0, "host:1")
    assert "beat <strong>ticking</strong>" in client.get("/console/").text
