"""The operator console through Flask's test client, in-process on SQLite (the embedded default's
``filesystem://`` broker under a temporary folder): every page, every action, sign-in, CSRF, the
security headers, and escaping of what tenants and vendors wrote. The browser test
(tests/integration/test_console_browser.py) drives the same pages against the real stack."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, url_for
from flask.testing import FlaskClient
from sqlalchemy import select

from app import create_app
from core.classify import Fault
from core.endpoint_health import HealthPolicy
from core.states import EventType
from foundation.settings import Settings
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.base import utcnow
from models.messages import DeadLetter
from models.read_models import console_pages
from models.store import store_of
from models.task import ExternalTask, TaskEvent
from service.dead_letters import dead_letter, disable_endpoint
from service.transitions import record_attempt_failure
from service.vendor_events import receive_event
from tests.middle.apps import in_process_app
from tests.middle.builders import at_vendor, new_client, submit
from webhooks.events import VendorEvent

TOKEN = "console-admin-token-" + "x" * 32
XSS = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def module_app(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One app for the module: building one (its routes' and its templates' code compiled) took
    a fifth of a CPU second, most of a test's. Each test still gets a database of its own (``app``)."""
    app = in_process_app(
        migrated_template,
        tmp_path_factory.mktemp("console"),
        LIAISON_ADMIN_TOKEN=TOKEN,
        LIAISON_FLOWER_URL="http://127.0.0.1:5555",
    )
    yield app
    app.extensions["liaison"].db.dispose()


@pytest.fixture
def app(module_app: Flask, migrated_template: Path) -> Iterator[Flask]:
    """The module's app on a fresh database: its connections closed, its file a new copy of the
    template (the app keeps no other state between requests: sessions, limits and audit are rows)."""
    db = module_app.extensions["liaison"].db
    db.dispose()
    path = Path(db.engine.url.database)
    for leftover in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(migrated_template, path)
    yield module_app
    db.dispose()


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF field in the page"
    return match[1]


def sign_in(client: FlaskClient, name: str = "alice") -> str:
    page = client.get("/console/sign-in")
    response = client.post("/console/sign-in", data={"operator": name, "token": TOKEN, "csrf_token": _csrf(page.text)})
    assert response.status_code == 302, response.text
    return _csrf(client.get("/console/").text)


@pytest.fixture
def browser(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def signed_in(browser: FlaskClient) -> tuple[FlaskClient, str]:
    return browser, sign_in(browser)


def _ctx(app: Flask) -> Any:
    return app.extensions["liaison"]


@pytest.fixture
def world(app: Flask) -> dict[str, int]:
    """A bit of everything: a retrying task, a dead-lettered one (with its incident), an orphan,
    a disabled endpoint, a finished task; ids by name."""
    now = utcnow()
    ids: dict[str, int] = {}
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        retrying = submit(session, shop, "order-retrying", now=now)
        record_attempt_failure(session, retrying.outbox[0], "vendor answered 503", now + timedelta(seconds=30), now)
        dead = submit(session, shop, "order-dead", now=now)
        dead_letter(session, dead.outbox[0], "vendor down for good", Fault.SYSTEM, now)
        done = at_vendor(session, shop, "order-done", now=now)
        receive_event(
            session, "sim", "msg-done", VendorEvent(EventType.COMPLETED, "job-order-done", "succeeded", {"ok": 1}), now
        )
        receive_event(
            session, "sim", "msg-done", VendorEvent(EventType.COMPLETED, "job-order-done", "succeeded", {"ok": 1}), now
        )
        receive_event(session, "sim", "msg-orphan", VendorEvent(EventType.ACCEPTED, "job-nobody", None), now)
        waiting = at_vendor(session, shop, "order-waiting", job_id="job-nobody-yet", now=now)
        disable_endpoint(session, shop.id, "https://shop.example/gone", "410 Gone", now)
        for _ in range(HealthPolicy().failures_to_pause):
            store_of(session).endpoint_health.record_failure(
                session, shop.id, "https://slow.example", "read timeout <b>x</b>", now, HealthPolicy()
            )
        session.flush()
        ids["retrying"], ids["dead"], ids["done"], ids["waiting"] = retrying.task.id, dead.task.id, done.id, waiting.id
        ids["letter"] = session.scalars(select(DeadLetter.id)).one()
        ids["incident"] = session.scalars(select(Incident.id).where(Incident.kind == "submit_failed")).one()
        ids["orphan"] = session.scalars(select(OrphanEvent.id)).one()
        ids["endpoint"] = session.scalars(select(CallbackEndpoint.id)).one()
    return ids


# --- access ------------------------------------------------------------------------------------

PAGES = [
    "/console/",
    "/console/tasks",
    "/console/tasks/1",
    "/console/dead-letters",
    "/console/dead-letters/1",
    "/console/incidents",
    "/console/incidents/1",
    "/console/orphans",
    "/console/orphans/1",
    "/console/endpoints",
    "/console/clients",
    "/console/providers",
]


@pytest.mark.parametrize("path", PAGES)
def test_an_anonymous_visitor_is_sent_to_sign_in(browser: FlaskClient, path: str) -> None:
    response = browser.get(path)
    assert response.status_code == 302
    assert response.location.startswith("/console/sign-in?next=/console/")


def test_sign_in_takes_the_admin_token_and_sets_a_strict_http_only_cookie(browser: FlaskClient) -> None:
    csrf = _csrf(browser.get("/console/sign-in").text)
    wrong = browser.post("/console/sign-in", data={"operator": "alice", "token": "nope", "csrf_token": csrf})
    assert wrong.status_code == 401 and "not the admin token" in wrong.text
    bad_name = browser.post("/console/sign-in", data={"operator": "<b>", "token": TOKEN, "csrf_token": csrf})
    assert bad_name.status_code == 422
    no_csrf = browser.post("/console/sign-in", data={"operator": "alice", "token": TOKEN})
    assert no_csrf.status_code == 400
    ok = browser.post(
        "/console/sign-in?next=/console/incidents", data={"operator": "alice", "token": TOKEN, "csrf_token": csrf}
    )
    assert ok.status_code == 302 and ok.location == "/console/incidents"
    cookie = ok.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain http here
    assert TOKEN not in cookie
    assert 'signed in as <strong id="operator">alice</strong>' in browser.get("/console/").text


def test_the_cookie_is_secure_over_https_and_next_never_leaves_the_console(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/console/sign-in", base_url="https://localhost")
    response = client.post(
        "/console/sign-in?next=//evil.example/x",
        data={"operator": "alice", "token": TOKEN, "csrf_token": _csrf(page.text)},
        base_url="https://localhost",
    )
    assert "Secure" in response.headers["Set-Cookie"]
    assert response.location == "/console/"


def test_a_forged_or_foreign_cookie_is_not_a_session(app: Flask, browser: FlaskClient) -> None:
    browser.set_cookie("liaison_console", "eyJjc3JmIjoieCIsIm9wIjoibWFsbG9yeSJ9.forged", path="/console")
    assert browser.get("/console/").status_code == 302


def test_sign_out_ends_the_session(signed_in: tuple[FlaskClient, str]) -> None:
    client, csrf = signed_in
    assert client.post("/console/sign-out", data={}).status_code == 400  # CSRF on sign-out too
    response = client.post("/console/sign-out", data={"csrf_token": csrf})
    assert response.status_code == 302
    assert client.get("/console/").status_code == 302


def test_every_answer_carries_the_security_headers(signed_in: tuple[FlaskClient, str]) -> None:
    client, _ = signed_in
    for response in (client.get("/console/"), client.get("/console/sign-in"), client.get("/console/tasks/999")):
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        assert "script-src" not in response.headers["Content-Security-Policy"]  # none at all: default-src
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "same-origin"
    assert client.get("/console/tasks/999").status_code == 404


def test_the_console_is_off_without_an_admin_token(migrated_template: Path, tmp_path: Path) -> None:
    path = tmp_path / "off.db"
    shutil.copyfile(migrated_template, path)
    app = create_app(Settings.from_env({"DATABASE_URL": f"sqlite:///{path}", "LIAISON_VAR_DIR": str(tmp_path)}))
    assert app.test_client().get("/console/sign-in").status_code == 404


def test_the_stylesheet_is_served_locally(browser: FlaskClient) -> None:
    response = browser.get("/console/static/console.css")
    assert response.status_code == 200 and "text/css" in response.content_type
    sign_in_page = browser.get("/console/sign-in").text
    assert "http://" not in sign_in_page and "https://" not in sign_in_page  # nothing from elsewhere


# --- pages -------------------------------------------------------------------------------------


def test_the_overview_answers_what_needs_a_person(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    page = client.get("/console/").text
    for section in ("tasks-by-state", "retrying", "outbox", "queues", "dead-letters", "incidents", "chart"):
        assert f'id="{section}"' in page, section
    assert re.search(r'id="dead-total">1<', page) and re.search(r'id="orphans-total">1<', page)
    assert re.search(r'id="endpoints-total">1<', page) and re.search(r'id="retrying-total">1<', page)
    assert re.search(r'id="paused-endpoints-total">1<', page)
    assert "order-retrying" in page and "vendor answered 503" in page
    assert "All counts exact." in page  # SQLite: nothing estimated
    assert 'href="http://127.0.0.1:5555"' in page  # Flower
    assert "<svg" in page and "1 succeeded, 1 failed" in page  # order-done; order-dead's submission failed
    assert 'http-equiv="refresh"' in page


def test_the_task_list_filters_searches_and_pages(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    assert "order-retrying" in client.get("/console/tasks").text
    retrying = client.get("/console/tasks?retrying=1").text
    assert "order-retrying" in retrying and "order-done" not in retrying
    failed = client.get("/console/tasks?state=failed").text
    assert "order-dead" in failed and "order-retrying" not in failed
    found = client.get("/console/tasks?correlation_id=order-done").text
    assert "order-done" in found and "order-dead" not in found
    assert "order-done" in client.get("/console/tasks?client=shop&provider=sim").text
    assert client.get("/console/tasks?client=nobody").status_code == 404
    assert client.get("/console/tasks?state=bogus").status_code == 422
    assert client.get("/console/tasks?cursor=!!").status_code == 400
    # a page of 50, then the cursor
    with _ctx(client.application).db.transaction() as session:
        shop = new_client(session, "bulk")
        for i in range(60):
            submit(session, shop, f"bulk-{i:02d}", now=utcnow())
    first = client.get("/console/tasks?client=bulk").text
    assert "bulk-59" in first and "bulk-09" not in first
    next_url = re.search(r'href="([^"]+)" id="next-page"', first)
    assert next_url
    second = client.get(next_url[1].replace("&amp;", "&")).text
    assert "bulk-09" in second and "bulk-59" not in second and 'id="next-page"' not in second


def test_a_task_page_shows_its_whole_timeline(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    retrying = client.get(f"/console/tasks/{world['retrying']}").text
    assert "submit.attempt_failed" in retrying and "vendor answered 503" in retrying and 'id="retrying"' in retrying
    assert "next_attempt_at" in retrying
    done = client.get(f"/console/tasks/{world['done']}").text
    assert "state.succeeded" in done and "event.duplicate" in done and "message id already received" in done
    assert "relay" in done  # its relay outbox row
    dead = client.get(f"/console/tasks/{world['dead']}").text
    assert "submit.dead_lettered" in dead and 'id="replay-task"' in dead and "submit_failed" in dead


def test_a_waiting_task_says_why_on_its_page(signed_in: tuple[FlaskClient, str]) -> None:
    """The app installs fair dispatch (create_app): past the client's window, a task waits, and says so."""
    client, _ = signed_in
    window = _ctx(client.application).settings.dispatch_window
    with _ctx(client.application).db.transaction() as session:
        busy = new_client(session, "busy")
        tasks = [submit(session, busy, f"busy-{i}", now=utcnow(), priority=2).task for i in range(window + 1)]
        session.flush()
        ids = [t.id for t in tasks]
    first = client.get(f"/console/tasks/{ids[0]}").text
    assert 'id="waiting"' not in first and "priority</dt><dd>2" in first
    last = client.get(f"/console/tasks/{ids[-1]}").text
    assert 'id="waiting"' in last and "waiting behind the client&#39;s earlier or more urgent tasks" in last
    assert "submit.queued" in last and 'id="callbacks-waiting"' not in last
    with _ctx(client.application).db.transaction() as session:  # its callback endpoint fails, and is paused
        for _ in range(HealthPolicy().failures_to_pause):
            store_of(session).endpoint_health.record_failure(
                session, busy.id, "https://shop.example", "answered 503", utcnow(), HealthPolicy()
            )
    assert 'id="callbacks-waiting"' in client.get(f"/console/tasks/{ids[0]}").text


def test_dead_letter_pages_filter_and_inspect(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    assert "vendor down for good" in client.get("/console/dead-letters?kind=submit&fault=system&provider=sim").text
    assert "vendor down for good" not in client.get("/console/dead-letters?fault=caller").text
    assert "vendor down for good" not in client.get("/console/dead-letters?older_than_s=3600").text
    assert "vendor down for good" in client.get("/console/dead-letters?newer_than_s=3600").text
    assert client.get("/console/dead-letters?kind=bogus").status_code == 422
    page = client.get(f"/console/dead-letters/{world['letter']}").text
    assert "vendor down for good" in page and "order-dead" in page and "No operator has acted" in page


def test_incident_orphan_endpoint_and_client_pages(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    assert "submit_failed" in client.get("/console/incidents").text
    assert "vendor down for good" in client.get(f"/console/incidents/{world['incident']}").text
    assert "job-nobody" in client.get("/console/orphans").text
    assert "job.accepted" in client.get(f"/console/orphans/{world['orphan']}").text
    endpoints = client.get("/console/endpoints").text
    assert "https://shop.example/gone" in endpoints
    assert endpoints.count('id="endpoint-health"') == 1 and "<title>Callback endpoints" in endpoints
    health = endpoints.split('id="endpoint-health"', 1)[1]
    assert "https://slow.example" in health and ">paused<" in health
    assert "read timeout &lt;b&gt;x&lt;/b&gt;" in health  # escaped like every string a tenant's endpoint causes
    clients = client.get("/console/clients").text
    assert "shop" in clients and "https://shop.example/cb" in clients
    with _ctx(client.application).db.transaction() as session:
        secrets = session.scalars(select(ExternalTask).limit(1)).one().client.callback_secrets
    assert all(secret not in clients for secret in secrets)


# --- actions: CSRF, confirmation, and the actor on the record ------------------------------------


def _history(app: Flask, subject: str, subject_id: int) -> list[tuple[str, str]]:
    with _ctx(app).db.transaction() as session:
        return [(e.action, e.actor) for e in console_pages.operator_history(session, subject, subject_id)]


def _events(app: Flask, task_id: int) -> list[tuple[str, Any]]:
    with _ctx(app).db.transaction() as session:
        rows = session.scalars(select(TaskEvent).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id))
        return [(e.kind, e.detail.get("by")) for e in rows]


def test_replaying_a_dead_letter_asks_first_needs_the_csrf_token_and_records_who(
    signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    client, csrf = signed_in
    url = f"/console/dead-letters/{world['letter']}/replay"
    confirm = client.get(url)
    assert confirm.status_code == 200 and 'id="confirm"' in confirm.text and "Replay dead letter" in confirm.text
    assert client.post(url, data={}).status_code == 400
    assert client.post(url, data={"csrf_token": "x" * 43}).status_code == 400
    assert _history(client.application, "dead_letter", world["letter"]) == []
    response = client.post(url, data={"csrf_token": csrf})
    assert response.status_code == 302 and "done=replayed" in response.location
    assert _history(client.application, "dead_letter", world["letter"]) == [("replayed", "alice")]
    assert ("submit.replayed", "alice") in _events(client.application, world["dead"])
    assert client.post(url, data={"csrf_token": csrf}).status_code == 409  # once
    page = client.get(f"/console/dead-letters/{world['letter']}?done=replayed").text
    assert "Dead letter replayed" in page and "alice" in page


def test_discarding_and_replaying_matching_dead_letters(
    signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    client, csrf = signed_in
    confirm = client.get("/console/dead-letters/replay?kind=submit&fault=system")
    assert "1 now" in confirm.text and 'name="kind" value="submit"' in confirm.text
    assert client.post("/console/dead-letters/replay", data={"kind": "submit"}).status_code == 400
    response = client.post("/console/dead-letters/replay", data={"kind": "submit", "csrf_token": csrf})
    assert response.status_code == 302 and "replayed=1" in response.location
    assert _history(client.application, "dead_letter", world["letter"]) == [("replayed", "alice")]
    # a second failure, then discard
    with _ctx(client.application).db.transaction() as session:
        row = submit(session, new_client(session), "order-dead-2", now=utcnow()).outbox[0]
        dead_letter(session, row, "again", Fault.CALLER, utcnow())
        session.flush()
        letter_id = session.scalars(select(DeadLetter.id).where(DeadLetter.outbox_id == row.id)).one()
    assert client.post(f"/console/dead-letters/{letter_id}/discard", data={}).status_code == 400
    assert client.post(f"/console/dead-letters/{letter_id}/discard", data={"csrf_token": csrf}).status_code == 302
    assert _history(client.application, "dead_letter", letter_id) == [("discarded", "alice")]


def test_canceling_a_task_and_replaying_its_dead_letters_from_its_page(
    signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    client, csrf = signed_in
    url = f"/console/tasks/{world['waiting']}/cancel"
    assert "Cancel task" in client.get(url).text
    assert client.post(url, data={}).status_code == 400
    assert client.post(url, data={"csrf_token": csrf}).status_code == 302
    events = _events(client.application, world["waiting"])
    assert ("operator.cancel", "alice") in events and ("state.cancel_requested", None) in events
    done = f"/console/tasks/{world['done']}/cancel"
    assert client.post(done, data={"csrf_token": csrf}).status_code == 409  # final already
    replay = f"/console/tasks/{world['dead']}/replay"
    assert client.post(replay, data={}).status_code == 400
    assert client.post(replay, data={"csrf_token": csrf}).status_code == 302
    assert ("submit.replayed", "alice") in _events(client.application, world["dead"])
    assert client.get(replay).status_code == 409  # nothing open any more


def test_assigning_and_resolving_an_incident_with_a_note(
    signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    client, csrf = signed_in
    base = f"/console/incidents/{world['incident']}"
    assert client.post(base + "/assign", data={"owner": "bob"}).status_code == 400
    assert client.post(base + "/assign", data={"owner": "", "csrf_token": csrf}).status_code == 422
    assert client.post(base + "/assign", data={"owner": "bob", "note": "on it", "csrf_token": csrf}).status_code == 302
    assert client.post(base + "/resolve", data={"note": "vendor back"}).status_code == 400
    assert client.post(base + "/resolve", data={"note": "vendor back", "csrf_token": csrf}).status_code == 302
    page = client.get(base).text
    assert 'id="incident-state">resolved' in page and "vendor back" in page and 'id="owner">bob' in page
    assert _history(client.application, "incident", world["incident"]) == [("assigned", "alice"), ("resolved", "alice")]


def test_attaching_and_discarding_orphans(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, csrf = signed_in
    url = f"/console/orphans/{world['orphan']}/attach"
    assert client.post(url, data={"correlation_id": "order-waiting"}).status_code == 400
    assert client.post(url, data={"correlation_id": "no-such", "csrf_token": csrf}).status_code == 404
    # order-waiting is bound to another job: refused (409), nothing changes
    assert client.post(url, data={"correlation_id": "order-waiting", "csrf_token": csrf}).status_code == 409
    with _ctx(client.application).db.transaction() as session:
        task = submit(session, new_client(session), "order-late", now=utcnow()).task
        task_id = task.id
    response = client.post(url, data={"correlation_id": "order-late", "csrf_token": csrf})
    assert response.status_code == 302
    assert _history(client.application, "orphan", world["orphan"])[0] == ("attached", "alice")
    assert ("orphan.attached", "alice") in _events(client.application, task_id)
    # and a fresh one discarded
    with _ctx(client.application).db.transaction() as session:
        receive_event(session, "sim", "msg-2", VendorEvent(EventType.ACCEPTED, "job-other", None), utcnow())
        session.flush()
        orphan_id = session.scalars(select(OrphanEvent.id).where(OrphanEvent.vendor_job_id == "job-other")).one()
    assert "Discard orphan event" in client.get(f"/console/orphans/{orphan_id}/discard").text
    assert client.post(f"/console/orphans/{orphan_id}/discard", data={"csrf_token": csrf}).status_code == 302
    assert _history(client.application, "orphan", orphan_id) == [("discarded", "alice")]


def test_enabling_a_disabled_endpoint(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, csrf = signed_in
    url = f"/console/endpoints/{world['endpoint']}/enable"
    assert "Enable https://shop.example/gone" in client.get(url).text
    assert client.post(url, data={}).status_code == 400
    assert client.post(url, data={"csrf_token": csrf}).status_code == 302
    assert _history(client.application, "endpoint", world["endpoint"]) == [("enabled", "alice")]
    assert "None: every callback endpoint is enabled" in client.get("/console/endpoints").text


# --- escaping -----------------------------------------------------------------------------------


def test_script_in_an_input_an_outcome_or_an_error_stays_inert(app: Flask, signed_in: tuple[FlaskClient, str]) -> None:
    client, _ = signed_in
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        evil = new_client(session, "evil")
        task = at_vendor(session, evil, XSS, job_id="job-xss", now=now)
        task.input = {"note": XSS}
        receive_event(
            session, "sim", "m-xss", VendorEvent(EventType.COMPLETED, "job-xss", "succeeded", {"html": XSS}), now
        )
        row = submit(session, evil, "xss-dead", now=now).outbox[0]
        record_attempt_failure(session, row, f"vendor said {XSS}", now + timedelta(seconds=60), now)
        dead_letter(session, row, f"vendor said {XSS}", Fault.SYSTEM, now)
        receive_event(
            session, "sim", "m-xss-orphan", VendorEvent(EventType.COMPLETED, "job-?", "failed", {"x": XSS}), now
        )
        session.flush()
        ids = {
            "task": task.id,
            "letter": session.scalars(select(DeadLetter.id)).one(),
            "orphan": session.scalars(select(OrphanEvent.id)).one(),
            "incident": session.scalars(select(Incident.id)).one(),
        }
    pages = [
        "/console/",
        "/console/tasks",
        f"/console/tasks?correlation_id={XSS}",
        f"/console/tasks/{ids['task']}",
        "/console/dead-letters",
        f"/console/dead-letters/{ids['letter']}",
        f"/console/dead-letters/{ids['letter']}/replay",
        "/console/incidents",
        f"/console/incidents/{ids['incident']}",
        f"/console/orphans/{ids['orphan']}",
    ]
    for path in pages:
        page = client.get(path)
        assert page.status_code == 200, path
        assert "<script>" not in page.text, path
    task_page = client.get(f"/console/tasks/{ids['task']}").text
    assert task_page.count("&lt;script&gt;") >= 3  # correlation id, input, outcome
    assert "&lt;script&gt;" in client.get(f"/console/dead-letters/{ids['letter']}").text


def test_the_admin_api_and_the_console_name_their_actors_differently(app: Flask, world: dict[str, int]) -> None:
    """The admin token is one shared credential: the API records itself; the console, the name."""
    admin = {"Authorization": f"Bearer {TOKEN}"}
    response = app.test_client().post(f"/admin/v1/dead-letters/{world['letter']}/discard", headers=admin)
    assert response.status_code == 200
    assert _history(app, "dead_letter", world["letter"]) == [("discarded", "admin API")]
    assert ("submit.discarded", "admin API") in _events(app, world["dead"])


def test_a_task_whose_stored_input_is_too_deep_to_decode_still_shows(
    app: Flask, signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    """Rows stored before the depth limit existed: shown as stored, never a 500."""
    from sqlalchemy import text

    client, _ = signed_in
    deep = "[" * 5000 + "]" * 5000
    with _ctx(app).db.transaction() as session:
        session.execute(
            text("UPDATE external_tasks SET input = :deep WHERE id = :id"), {"deep": deep, "id": world["done"]}
        )
    page = client.get(f"/console/tasks/{world['done']}")
    assert page.status_code == 200 and "shown as stored: deeper than LIAISON_MAX_JSON_DEPTH" in page.text


# --- where people tripped (issue 22) -------------------------------------------------------------


def _relay_rows(session: Any, task_id: int) -> list[Any]:
    from models.messages import OutboxMessage

    query = select(OutboxMessage).where(OutboxMessage.task_id == task_id, OutboxMessage.kind == "relay")
    return list(session.scalars(query.order_by(OutboxMessage.id)))


def _final_task_with_a_failing_callback(app: Flask) -> int:
    """A task that succeeded while its acceptance callback fails (the endpoint answered 503)."""
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop")
        task = at_vendor(session, shop, "order-callback-down", now=now)
        receive_event(session, "sim", "m-acc", VendorEvent(EventType.ACCEPTED, "job-order-callback-down", None), now)
        accepted = _relay_rows(session, task.id)[0]
        record_attempt_failure(session, accepted, "callback answered 503", now + timedelta(seconds=98), now)
        receive_event(
            session, "sim", "m-ok", VendorEvent(EventType.COMPLETED, "job-order-callback-down", "succeeded", {}), now
        )
        session.flush()
        assert (task.state, task.next_attempt_at) == ("succeeded", None)
        return task.id


def test_a_failing_callback_is_retrying_even_once_its_task_is_final(
    app: Flask, signed_in: tuple[FlaskClient, str]
) -> None:
    """The domain app's endpoint fails the acceptance callback; the task then succeeds (its own
    retry time is cleared), but its callback still retries: the overview counts it, says it is
    the callback, and the list's "retrying now" finds it."""
    client, _ = signed_in
    task_id = _final_task_with_a_failing_callback(app)
    overview = client.get("/console/").text
    assert re.search(r'id="retrying-total">1<', overview)
    retrying = overview.split('<section id="retrying">', 1)[1].split("</section>", 1)[0]
    assert "order-callback-down" in retrying and "callback answered 503" in retrying
    assert '<td class="retrying-what">callback</td>' in retrying
    listed = client.get("/console/tasks?retrying=1").text
    assert "order-callback-down" in listed and "callback retrying" in listed
    page = client.get(f"/console/tasks/{task_id}").text
    assert 'id="callback-retrying"' in page and "callback (relay) retrying: attempt 2" in page
    assert 'id="retrying"' not in page  # its submission is not retrying
    assert '<dt id="last-error-label">callback error</dt>' in page


def test_the_admin_api_and_the_cli_list_a_final_task_whose_callback_is_failing(app: Flask) -> None:
    """The operators' other two views of "retrying now" count as the console does."""
    _final_task_with_a_failing_callback(app)
    listed = app.test_client().get("/admin/v1/tasks?retrying=true", headers={"Authorization": f"Bearer {TOKEN}"})
    assert listed.status_code == 200, listed.text
    assert [t["correlation_id"] for t in (listed.json or {})["items"]] == ["order-callback-down"]
    printed = app.test_cli_runner().invoke(args=["liaison", "tasks", "retrying", "--json"])
    assert printed.exit_code == 0, printed.output
    assert [t["correlation_id"] for t in json.loads(printed.output)] == ["order-callback-down"]


def test_a_task_page_says_where_its_callbacks_go_and_whose_error_it_shows(
    app: Flask, signed_in: tuple[FlaskClient, str]
) -> None:
    client, _ = signed_in
    now = utcnow()
    with _ctx(app).db.transaction() as session:
        shop = new_client(session, "shop", callback_url="https://user:pw@shop.example/default?token=s3cret")
        default = submit(session, shop, "order-default", now=now)
        record_attempt_failure(session, default.outbox[0], "vendor answered 503", now + timedelta(seconds=30), now)
        own = submit(session, shop, "order-own", now=now).task
        own.callback_url = "https://own.example/hook?key=k3y#frag"
        quiet = new_client(session, "quiet", callback_url=None)
        none = submit(session, quiet, "order-nowhere", now=now).task
        session.flush()
        ids = {"default": default.task.id, "own": own.id, "none": none.id}
    default_page = client.get(f"/console/tasks/{ids['default']}").text
    assert (
        '<dd id="callbacks-to"><code>https://shop.example/default</code> (the client\'s default URL)</dd>'
        in default_page
    )
    assert "s3cret" not in default_page and "user:pw" not in default_page
    assert '<dt id="last-error-label">vendor error</dt>' in default_page and "vendor answered 503" in default_page
    assert "submit retrying: attempt 2" in default_page
    own_page = client.get(f"/console/tasks/{ids['own']}").text
    assert '<dd id="callbacks-to"><code>https://own.example/hook</code></dd>' in own_page and "k3y" not in own_page
    # no error: nothing at all where it would be, not a red dash
    assert '<dt id="last-error-label">last error</dt><dd id="last-error"></dd>' in own_page
    assert 'id="callbacks-to">no HTTP callback</dd>' in client.get(f"/console/tasks/{ids['none']}").text


def test_a_task_opens_by_its_correlation_id(app: Flask, signed_in: tuple[FlaskClient, str]) -> None:
    """``/console/tasks/<correlation id>`` opens the task (``?client=`` or ``/console/clients/<client>/
    tasks/<id>`` when several clients used the name); an unknown one is the console's 404 page."""
    client, _ = signed_in
    with _ctx(app).db.transaction() as session:
        shop, other = new_client(session, "shop"), new_client(session, "other")
        mine = submit(session, shop, "order-42", now=utcnow()).task
        twin = submit(session, shop, "order-twin", now=utcnow()).task
        theirs = submit(session, other, "order-twin", now=utcnow()).task
        digits = submit(session, other, "4242", now=utcnow()).task
        session.flush()
        ids = {"mine": mine.id, "twin": twin.id, "theirs": theirs.id, "digits": digits.id}
    one = client.get("/console/tasks/order-42")
    assert one.status_code == 302 and one.location == f"/console/tasks/{ids['mine']}"
    assert "order-42" in client.get("/console/tasks/order-42", follow_redirects=True).text
    both = client.get("/console/tasks/order-twin")
    assert both.status_code == 302 and "correlation_id=order-twin" in both.location
    listed = client.get(both.location).text
    assert "Several clients have a task with this correlation id" in listed
    assert f"/console/tasks/{ids['twin']}" in listed and f"/console/tasks/{ids['theirs']}" in listed
    assert client.get("/console/tasks/order-twin?client=other").location == f"/console/tasks/{ids['theirs']}"
    assert client.get("/console/clients/shop/tasks/order-twin").location == f"/console/tasks/{ids['twin']}"
    assert client.get("/console/clients/other/tasks/4242").location == f"/console/tasks/{ids['digits']}"
    for missing in ("/console/tasks/no-such", "/console/tasks/order-42?client=other", "/console/clients/x/tasks/a"):
        response = client.get(missing)
        assert response.status_code == 404 and response.mimetype == "text/html", missing
        assert 'id="error"' in response.text, missing
    assert client.get("/console/tasks/bad%00id").status_code == 404


def test_dead_letters_link_to_their_task(signed_in: tuple[FlaskClient, str], world: dict[str, int]) -> None:
    client, _ = signed_in
    link = f'<a class="task-link" href="/console/tasks/{world["dead"]}">order-dead</a>'
    assert link in client.get("/console/dead-letters").text
    page = client.get(f"/console/dead-letters/{world['letter']}").text
    assert f'<a id="letter-task" href="/console/tasks/{world["dead"]}">order-dead</a>' in page


# --- actions on POST only; sessions revoked on the server (issue 44) -----------------------------


def _everything(app: Flask) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: what an action would change (a task's state, a dead letter's, an
    outbox row, an operator event, a console session)."""
    from models import Base

    with _ctx(app).db.transaction() as session:
        return {
            table.name: sorted((tuple(row) for row in session.execute(table.select())), key=repr)
            for table in Base.metadata.sorted_tables
        }


def _console_actions(app: Flask) -> list[Any]:
    """Every console route that takes a POST: today's actions and any added later."""
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("console.") and "POST" in (r.methods or ())]
    assert len(rules) >= 12, [r.rule for r in rules]  # the enumeration finds them
    return rules


def _addresses(app: Flask, rule: Any, values: dict[str, list[Any]]) -> list[str]:
    """The rule's URL for each candidate value of its arguments (a route with an argument the test
    does not know fails here: give it a value below, so that the new route is tried too)."""
    missing = rule.arguments - values.keys()
    assert not missing, f"{rule.rule}: no test value for {missing}: add one to ACTION_ARGUMENTS"
    combos: list[dict[str, Any]] = [{}]
    for name in sorted(rule.arguments):
        combos = [{**c, name: v} for c in combos for v in values[name]]
    with app.test_request_context():
        return [url_for(rule.endpoint, **combo) for combo in combos]


#: which world row each action argument names (several where the action differs by the row's state:
#: a task that can be cancelled, a task with an open dead letter to replay)
ACTION_ARGUMENTS = {
    "task_id": ["waiting", "dead"],
    "letter_id": ["letter"],
    "incident_id": ["incident"],
    "orphan_id": ["orphan"],
    "endpoint_id": ["endpoint"],
}


def test_no_method_but_post_acts_and_every_unsafe_method_needs_the_csrf_token(
    app: Flask, signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    """A HEAD (which Flask answers on every GET route) or a GET to an action's address, with a valid
    session and no CSRF token, changes nothing: no task cancelled, no dead letter replayed or
    discarded, nobody signed out. Every action route the app has is tried (taken from its url_map)."""
    client, _ = signed_in
    values = {name: [world[w] for w in which] for name, which in ACTION_ARGUMENTS.items()}
    before = _everything(app)
    tried = []
    for rule in _console_actions(app):
        for url in _addresses(app, rule, values):
            for method in ("HEAD", "GET", "PUT", "PATCH", "DELETE"):
                response = client.open(url, method=method, data={"kind": "submit"} if method != "HEAD" else None)
                assert response.status_code < 500, (method, url, response.status_code)
                assert response.status_code != 302 or "done=" not in response.location, (method, url)
                tried.append((method, url))
            after = _everything(app)
            assert after == before, f"{url}: changed {[t for t in after if after[t] != before[t]]}"
    assert client.get("/console/").status_code == 200  # still signed in
    assert ("HEAD", f"/console/tasks/{world['waiting']}/cancel") in tried
    assert ("HEAD", "/console/dead-letters/replay") in tried


def _cookie(client: FlaskClient) -> str:
    cookie = client.get_cookie("liaison_console", path="/console")
    assert cookie is not None
    return cookie.value


def test_a_cookie_copied_before_sign_out_is_refused_after_it(
    app: Flask, signed_in: tuple[FlaskClient, str], world: dict[str, int]
) -> None:
    """Sign-out ends the session on the server: the copy (a stolen cookie, another tab's) is then
    anonymous, sent to sign in, and its form token acts on nothing."""
    client, csrf = signed_in
    copied = _cookie(client)
    thief = app.test_client()
    thief.set_cookie("liaison_console", copied, path="/console")
    assert thief.get("/console/").status_code == 200  # the copy works while the session lasts
    assert client.post("/console/sign-out", data={"csrf_token": csrf}).status_code == 302
    before = _everything(app)
    page = thief.get("/console/")
    assert page.status_code == 302 and page.location.startswith("/console/sign-in")
    thief.set_cookie("liaison_console", copied, path="/console")  # the answer above replaced it
    cancel = thief.post(f"/console/tasks/{world['waiting']}/cancel", data={"csrf_token": csrf})
    assert cancel.status_code in (302, 400) and "done=" not in (cancel.location or "")
    thief.set_cookie("liaison_console", copied, path="/console")
    discard = thief.post(f"/console/dead-letters/{world['letter']}/discard", data={"csrf_token": csrf})
    assert discard.status_code in (302, 400) and "done=" not in (discard.location or "")
    assert _everything(app) == before


def test_sign_out_holds_in_every_web_process(app: Flask, migrated_template: Path, tmp_path: Path) -> None:
    """Two web processes on one database: a sign-out on one ends the session on the other."""
    other = create_app(app.extensions["liaison"].settings)
    try:
        client = app.test_client()
        csrf = sign_in(client)
        elsewhere = other.test_client()
        elsewhere.set_cookie("liaison_console", _cookie(client), path="/console")
        assert elsewhere.get("/console/").status_code == 200
        assert client.post("/console/sign-out", data={"csrf_token": csrf}).status_code == 302
        assert elsewhere.get("/console/").status_code == 302
    finally:
        other.extensions["liaison"].db.dispose()


def test_sign_out_everywhere_ends_every_session_of_that_operator(app: Flask) -> None:
    laptop, phone, colleague = app.test_client(), app.test_client(), app.test_client()
    csrf = sign_in(laptop, "alice")
    sign_in(phone, "alice")
    sign_in(colleague, "bob")
    assert laptop.post("/console/sign-out-everywhere", data={}).status_code == 400  # CSRF
    assert laptop.post("/console/sign-out-everywhere", data={"csrf_token": csrf}).status_code == 302
    assert laptop.get("/console/").status_code == 302
    assert phone.get("/console/").status_code == 302
    assert colleague.get("/console/").status_code == 200


def test_an_expired_session_is_refused_and_removed_at_the_next_sign_in(app: Flask) -> None:
    """The row carries its expiry: the server refuses the session at it, whatever the cookie says,
    and a sign-in removes the rows past theirs (the table holds at most a session's lifetime)."""
    from sqlalchemy import func, update

    from models.console_sessions import ConsoleSession

    client = app.test_client()
    sign_in(client, "alice")
    with _ctx(app).db.transaction() as session:
        session.execute(update(ConsoleSession).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert client.get("/console/").status_code == 302
    sign_in(app.test_client(), "bob")
    with _ctx(app).db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(ConsoleSession)) == 1


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "POST"])
def test_every_unsafe_method_needs_the_csrf_token(app: Flask, method: str) -> None:
    """The console's routes take no PUT, PATCH or DELETE today (Flask answers 405 before the
    console's hooks run); the check is on every method but GET, HEAD and OPTIONS all the same, so a
    route that takes one later is covered."""
    from app.console import access

    with (
        app.test_request_context("/console/tasks/1/cancel", method=method, data={"x": "1"}),
        pytest.raises(access.CsrfRefused),
    ):
        access.load_session()
    for safe in ("GET", "HEAD", "OPTIONS"):
        with app.test_request_context("/console/", method=safe):
            assert access.load_session() is not None  # anonymous: sent to sign in, no CSRF needed to read


#: the admin API's route arguments (the world's rows; ``key``, ``kind``: any value)
ADMIN_ARGUMENTS = {"letter_id": ["letter"], "incident_id": ["incident"], "orphan_id": ["orphan"]}


def test_no_get_or_head_of_the_admin_api_changes_anything(app: Flask, world: dict[str, int]) -> None:
    """The admin API acts on POST, PUT and DELETE only: a GET or HEAD (a link, a prefetch, a
    monitoring probe with the token) of any of its addresses changes no row."""
    admin = {"Authorization": f"Bearer {TOKEN}"}
    values: dict[str, list[Any]] = {n: [world[w] for w in which] for n, which in ADMIN_ARGUMENTS.items()}
    values.update(name=["shop"], key=["key-1"], kind=["submit_failed"])
    rules = [r for r in app.url_map.iter_rules() if r.rule.startswith("/admin/")]
    assert len(rules) >= 20
    client = app.test_client()
    before = _everything(app)
    for rule in rules:
        for url in _addresses(app, rule, values):
            for method in ("HEAD", "GET"):
                response = client.open(url, method=method, headers=admin)
                assert response.status_code in (200, 405, 422), (method, url, response.status_code)
    assert _everything(app) == before
