"""A task's timeline is read a page at a time (issue 44, point 8): ``GET /api/v1/tasks/<id>`` shows
at most ``TIMELINE_CAP`` entries, the oldest, and a cursor that ``GET /api/v1/tasks/<id>/timeline``
pages on from, to the end, every entry once; the console's task page and ``tasks show`` show the
newest and say how many there are. Each page is one statement on the timeline, however long it is.
In-process (Flask's test client and CLI runner, SQLite)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event, insert, select

from app.api import tasks as tasks_api
from app.console import task_views
from models.base import utcnow
from models.task import ExternalTask, TaskEvent
from service.credentials import create_client
from tests.middle.apps import in_process_app

TOKEN = "timeline-admin-token-" + "t" * 32
CAP = tasks_api.TIMELINE_CAP
#: more than two pages of the cap, and not a multiple of any page size the tests use
MANY = 2 * CAP + 7


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    app = in_process_app(migrated_template, tmp_path, LIAISON_ADMIN_TOKEN=TOKEN)
    yield app
    app.extensions["liaison"].db.dispose()


@pytest.fixture
def api(app: Flask) -> tuple[FlaskClient, dict[str, str]]:
    with app.extensions["liaison"].db.transaction() as session:
        _, key, _ = create_client(session, "shop", "https://shop.example/cb", ("https://shop.example",))
    return app.test_client(), {"Authorization": f"Bearer {key.api_key}"}


def _task_with_events(app: Flask, client: FlaskClient, auth: dict[str, str], cid: str, extra: int) -> list[int]:
    """Submit ``cid`` and add ``extra`` progress events after its own (numbered ``n`` 0 up); the
    numbers of its whole timeline in order (its own events first, as -1)."""
    submitted = client.post("/api/v1/tasks", json={"input": {"n": 1}, "correlation_id": cid}, headers=auth)
    assert submitted.status_code == 202, submitted.text
    with app.extensions["liaison"].db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == cid))
        own = len(session.scalars(select(TaskEvent.id).where(TaskEvent.task_id == task_id)).all())
        if extra:
            session.execute(insert(TaskEvent), [_progress(task_id, n) for n in range(extra)])
    return [-1] * own + list(range(extra))


def _progress(task_id: int | None, n: int) -> dict[str, Any]:
    return {"task_id": task_id, "at": utcnow(), "kind": "event.progress", "detail": {"n": n}}


def _numbers(entries: list[dict[str, Any]]) -> list[int]:
    return [e["detail"].get("n", -1) if e["kind"] == "event.progress" else -1 for e in entries]


class _Statements:
    """The statements the app's engine runs while counting, and those that read the timeline."""

    def __init__(self, app: Flask) -> None:
        self.all: list[str] = []
        event.listen(app.extensions["liaison"].db.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.all.append(statement)

    def reset(self) -> None:
        self.all.clear()

    @property
    def timeline_reads(self) -> list[str]:
        return [s for s in self.all if re.search(r"FROM task_events\b", s)]


def test_a_long_timeline_shows_the_cap_and_pages_through_every_entry_once(
    app: Flask, api: tuple[FlaskClient, dict[str, str]]
) -> None:
    client, auth = api
    expected = _task_with_events(app, client, auth, "long", MANY)
    statements = _Statements(app)

    got = client.get("/api/v1/tasks/long", headers=auth)
    assert got.status_code == 200, got.text
    body = got.get_json()
    assert len(body["timeline"]) == CAP
    assert _numbers(body["timeline"]) == expected[:CAP]
    assert re.fullmatch(r"t[1-9][0-9]*", body["timeline_next_cursor"])
    assert len(statements.timeline_reads) == 1  # one statement for the page, none per entry

    seen, cursor, pages = list(_numbers(body["timeline"])), body["timeline_next_cursor"], 0
    while cursor is not None:
        statements.reset()
        page = client.get("/api/v1/tasks/long/timeline", query_string={"cursor": cursor, "limit": 150}, headers=auth)
        assert page.status_code == 200, page.text
        assert len(statements.timeline_reads) == 1
        data = page.get_json()
        assert 0 < len(data["timeline"]) <= 150
        seen += _numbers(data["timeline"])
        cursor, pages = data["next_cursor"], pages + 1
    assert seen == expected  # every entry, in order, none twice
    assert pages == -(-(len(expected) - CAP) // 150)


def test_the_timeline_pages_from_the_start_and_a_page_costs_the_same_however_long(
    app: Flask, api: tuple[FlaskClient, dict[str, str]]
) -> None:
    client, auth = api
    expected = _task_with_events(app, client, auth, "long", MANY)
    statements = _Statements(app)
    counts = {}
    for limit in (1, 500):
        statements.reset()
        first = client.get("/api/v1/tasks/long/timeline", query_string={"limit": limit}, headers=auth).get_json()
        counts[limit] = len(statements.all)
        assert _numbers(first["timeline"]) == expected[:limit]
        assert (first["next_cursor"] is None) == (limit >= len(expected))
    assert counts[1] == counts[500]
    default = client.get("/api/v1/tasks/long/timeline", headers=auth).get_json()
    assert _numbers(default["timeline"]) == expected[:CAP]


def test_a_cursor_taken_at_the_end_later_gives_what_was_added_since(
    app: Flask, api: tuple[FlaskClient, dict[str, str]]
) -> None:
    client, auth = api
    expected = _task_with_events(app, client, auth, "growing", CAP)
    whole = client.get("/api/v1/tasks/growing/timeline", query_string={"limit": 500}, headers=auth).get_json()
    assert whole["next_cursor"] is None and _numbers(whole["timeline"]) == expected
    last = client.get("/api/v1/tasks/growing", headers=auth).get_json()["timeline_next_cursor"]
    assert last is not None  # more than the cap: the submit's own events and CAP more
    with app.extensions["liaison"].db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == "growing"))
        session.execute(insert(TaskEvent), [_progress(task_id, -7)])
    rest = client.get("/api/v1/tasks/growing/timeline", query_string={"cursor": last, "limit": 500}, headers=auth)
    assert _numbers(rest.get_json()["timeline"]) == [*expected[CAP:], -7]


def test_a_short_timeline_is_whole_with_no_cursor(app: Flask, api: tuple[FlaskClient, dict[str, str]]) -> None:
    client, auth = api
    expected = _task_with_events(app, client, auth, "short", 3)
    body = client.get("/api/v1/tasks/short", headers=auth).get_json()
    assert _numbers(body["timeline"]) == expected and body["timeline_next_cursor"] is None
    assert body["timeline"][0]["kind"] == "requested"  # the submit, first


@pytest.mark.parametrize(
    ("query", "status"),
    [({"limit": "0"}, 422), ({"limit": "501"}, 422), ({"limit": "x"}, 422), ({"cursor": "x1"}, 400)],
)
def test_a_bad_limit_or_cursor_is_refused(
    app: Flask, api: tuple[FlaskClient, dict[str, str]], query: dict[str, str], status: int
) -> None:
    client, auth = api
    _task_with_events(app, client, auth, "t", 0)
    assert client.get("/api/v1/tasks/t/timeline", query_string=query, headers=auth).status_code == status


def test_another_clients_task_has_no_timeline_to_read(app: Flask, api: tuple[FlaskClient, dict[str, str]]) -> None:
    client, auth = api
    _task_with_events(app, client, auth, "mine", 2)
    with app.extensions["liaison"].db.transaction() as session:
        _, other, _ = create_client(session, "other", "https://other.example/cb", ("https://other.example",))
    theirs = client.get("/api/v1/tasks/mine/timeline", headers={"Authorization": f"Bearer {other.api_key}"})
    assert theirs.status_code == 404


def test_the_console_and_the_cli_show_the_newest_events_and_how_many_there_are(
    app: Flask, api: tuple[FlaskClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, auth = api
    expected = _task_with_events(app, client, auth, "long", 40)
    total = len(expected)
    monkeypatch.setattr(task_views, "TIMELINE_LIMIT", 25)
    with app.extensions["liaison"].db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.correlation_id == "long"))
    console = app.test_client()
    page = console.get("/console/sign-in")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    console.post("/console/sign-in", data={"operator": "alice", "token": TOKEN, "csrf_token": csrf[1]})
    html = console.get(f"/console/tasks/{task_id}").text
    assert f"The newest 25 of {total} events" in html
    assert html.count('<tr class="event ') == 25 and "<em>n</em> 39" in html and "<em>n</em> 14" not in html

    runner = app.test_cli_runner()
    printed = runner.invoke(args=["liaison", "tasks", "show", "long", "--events", "10"])
    assert printed.exit_code == 0, printed.output
    assert f"the newest 10 of {total} events" in printed.output
    assert printed.output.count("event.progress") == 10 and "{'n': 39}" in printed.output
    as_json = json.loads(runner.invoke(args=["liaison", "tasks", "show", "long", "--events", "10", "--json"]).output)
    assert [e["detail"]["n"] for e in as_json["timeline"]] == list(range(30, 40))
    assert as_json["timeline_total"] == total
    whole = json.loads(runner.invoke(args=["liaison", "tasks", "show", "long", "--json"]).output)
    assert _numbers(whole["timeline"]) == expected and whole["timeline_total"] == total
