"""The console shows reasons (issue 43, point 7): a vendor's failure reason where "last error"
stood empty, the vendor's answer with a dead letter, caller-fault letters replayed only with a
warning and without an incident each, ages with units, one timestamp format, incidents linked to
their task, and beat's and the workers' liveness on the overview. In-process, like test_console."""

from __future__ import annotations

import re
from datetime import timedelta

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from core.classify import Fault
from core.endpoint_health import HealthPolicy
from core.states import EventType
from models.attention import Incident
from models.base import utcnow
from models.endpoint_health import record_failure
from service.dead_letters import dead_letter
from service.vendor_events import receive_event
from tests.middle.builders import at_vendor, new_client, submit
from tests.middle.test_console import _ctx, app, browser, signed_in  # noqa: F401 (fixtures)
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
            record_failure(session, shop.id, "https://slow.example", "read timeout", now, HealthPolicy())
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
