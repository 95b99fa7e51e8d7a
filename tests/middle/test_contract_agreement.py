"""The OpenAPI document and the server agree on every value a task submission may carry (issue 43):
for generated bodies, the document's ``SubmitTask`` schema (JSON Schema 2020-12, formats asserted)
takes a body exactly when ``POST /api/v1/tasks`` answers 202, and refuses it exactly when the server
refuses it (422; 400 for U+0000 anywhere). The one kind of value the document takes and the server
refuses is a ``callback_url`` its outbound guard refuses (an address that is not public, a malformed
host or port), which the field's description states and the answer names as the guard's refusal.

Through the whole app in-process (Flask's test client, SQLite), a fresh client per body, so a
generated ``correlation_id`` never meets an earlier task. The clock's rules (a deadline in the
future, the acceptance deadline not after the execution one) are the server's alone: generated
deadlines lie years ahead, and a body names one of the two deadlines at most.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from app.api.contract import CORRELATION_ID, MAX_TIMEOUT_S, PRINTABLE
from app.api.openapi import document
from core.outbound_guard import REFUSED_PREFIX
from service.credentials import create_client
from service.incidents import IncidentKind
from tests.middle.apps import in_process_app

Submit = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
SETTINGS = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def submit(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Submit:
    app = in_process_app(
        migrated_template,
        tmp_path_factory.mktemp("agreement"),
        LIAISON_CLIENT_SUBMIT_RATE_PER_S="10000",
        LIAISON_CLIENT_SUBMIT_BURST="10000",
    )
    db = app.extensions["liaison"].db
    db.engine.dispose()

    @event.listens_for(db.engine, "connect")
    def _no_fsync(dbapi_conn: Any, _record: Any) -> None:  # a throwaway file: commits need no fsync
        dbapi_conn.execute("PRAGMA synchronous=OFF")

    client: FlaskClient = app.test_client()
    names = itertools.count()

    def post(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with db.transaction() as session:
            _, key, _ = create_client(session, f"agree-{next(names)}", "https://shop.example/cb")
        response = client.post("/api/v1/tasks", json=body, headers={"Authorization": f"Bearer {key.api_key}"})
        return response.status_code, response.get_json()

    return post


SCHEMA = jsonschema_rs.Draft202012Validator(
    {"$ref": "#/components/schemas/SubmitTask", "components": document()["components"]}, validate_formats=True
)


def agree(submit: Submit, body: dict[str, Any]) -> tuple[bool, int]:
    """Assert the document and the server agree on ``body``; (the document takes it, the status)."""
    allowed = SCHEMA.is_valid(body)
    status, answer = submit(body)
    assert status in (202, 400, 422), (status, answer)  # 400: U+0000 somewhere, which the document refuses too
    if allowed and status != 202:  # only a callback URL the guard refuses, which the document says it may
        assert [e["field"] for e in answer["errors"]] == ["callback_url"], (body, answer)
        assert answer["errors"][0]["message"].startswith(REFUSED_PREFIX), (body, answer)
    elif not allowed:
        assert status in (400, 422), (body, "the document refuses what the server takes")
    return allowed, status


# --- callback_url ----------------------------------------------------------------------------

LABEL = st.from_regex(r"\A[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,10}[A-Za-z0-9_])?\Z")
#: public-looking names: any number of labels, the last not a number (``0x1f`` is one: an IPv4 attempt)
NAME = (
    st.lists(LABEL, min_size=1, max_size=7)
    .map(".".join)
    .filter(lambda n: not re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]*", n.rsplit(".", 1)[-1]))
)
ODD_LABEL = st.sampled_from(["", "a" * 64, "ü", "-a", "a-", "0x7f", "1", "a b", "a%2e", "[", "*"])
HOST = st.one_of(
    NAME,
    st.lists(LABEL | ODD_LABEL, min_size=1, max_size=5).map(".".join),
    st.sampled_from(["localhost", "127.0.0.1", "10.1.2.3", "8.8.8.8", "2130706433", "[::1]", "[2606:4700::1111]"]),
    st.sampled_from(["[0]", "[::1", "a" * 254, "x." * 126 + "com", "a.123", "shop.example."]),
)
PORT = st.none() | st.integers(0, 70000).map(str) | st.sampled_from(["", "x", "080", "-1"])
REST = st.sampled_from(["", "/", "/cb", "/a/b?c=d&e={f}#g", "?q", "#frag", "/a b", "/a\\b", "/ü", "/\t"])
URL = st.builds(
    lambda scheme, user, host, port, rest: f"{scheme}{user}{host}{'' if port is None else ':' + port}{rest}",
    st.sampled_from(["http://", "https://", "HTTPS://", "ftp://", "http:/", "", "javascript:"]),
    st.sampled_from(["", "", "", "user@", "u:p@"]),
    HOST,
    PORT,
    REST,
)


@SETTINGS
@given(URL)
@example("https://hooks.shop.example.com/cb")  # four labels: the old document's pattern refused it
@example("https://a.b.c.d.e.f.example/cb")
def test_the_document_takes_a_callback_url_exactly_when_the_server_does(submit: Submit, url: str) -> None:
    agree(submit, {"input": {"sku": "A1"}, "callback_url": url})


@SETTINGS
@given(
    NAME.filter(lambda n: len(n) <= 253),
    st.none() | st.integers(1, 65535),
    st.from_regex(r"\A(?:[/?#][!-\[\]-~]{0,30})?\Z"),
)
def test_every_public_callback_url_is_taken_by_both(submit: Submit, name: str, port: int | None, rest: str) -> None:
    url = f"https://{name}{'' if port is None else f':{port}'}{rest}"
    assert agree(submit, {"input": {}, "callback_url": url}) == (True, 202), url


# --- every other field -------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
NUMBERS = st.one_of(
    st.integers(-2, 8),
    st.sampled_from([0, 1, MAX_TIMEOUT_S, MAX_TIMEOUT_S + 1, 2.0, 2.5, -0.0, 1e3, True, False, "3", None]),
)
FUTURE = st.datetimes(min_value=datetime(2031, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.timezones())
TIME = st.one_of(
    FUTURE.map(lambda d: d.isoformat()),
    FUTURE.map(lambda d: d.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
    FUTURE.map(lambda d: d.isoformat(sep=" ")),
    FUTURE.map(lambda d: d.isoformat(timespec="minutes")),
    FUTURE.map(lambda d: d.replace(tzinfo=None).isoformat()),
    FUTURE.map(lambda d: d.date().isoformat()),
    st.sampled_from(["tomorrow", "", "2031-02-30T00:00:00Z", "2031-01-01T24:00:00Z", "2031-01-01T00:00:60Z"]),
    st.sampled_from([1893456000, None, "20310101T000000Z", "2031-01-01t00:00:00z", "2031-01-01T00:00:00+24:00"]),
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "input": st.dictionaries(st.text(max_size=3), JSON, max_size=3) | st.text(max_size=5) | JSON,
    "correlation_id": st.from_regex(CORRELATION_ID) | st.text(max_size=8) | st.none() | st.integers(),
    "concurrency_key": st.from_regex(PRINTABLE) | st.text(max_size=8) | st.none() | st.just(7),
    "provider": st.sampled_from(["sim", None, 3, ["sim"]]),  # a configured one: the others are server state
    "on_deadline": st.sampled_from(["escalate", "cancel", "Cancel", "", None, 1]),
    "priority": NUMBERS,
    "heartbeat_timeout_s": NUMBERS,
    "colour": st.just("blue"),
}


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), unique=True, max_size=4))
    body = {name: draw(FIELDS[name]) for name in names}
    body.setdefault("input", {"sku": "A1"})
    # One of the two deadlines at most (their order is the clock's rule), as a timeout, a time or both.
    deadline = draw(st.sampled_from(["acceptance", "execution"]))
    for form in draw(st.lists(st.sampled_from(["timeout_s", "deadline"]), unique=True, max_size=2)):
        body[f"{deadline}_{form}"] = draw(NUMBERS if form == "timeout_s" else TIME)
    return body


@SETTINGS
@given(bodies())
@example({"input": {}, "priority": 3.0, "execution_timeout_s": 60.0})
@example({"input": {}, "execution_deadline": (datetime.now(UTC) + timedelta(days=3650)).isoformat()})
@example({"input": {}, "acceptance_timeout_s": 60, "acceptance_deadline": "2031-01-01T00:00:00Z"})
def test_the_document_takes_a_body_exactly_when_the_server_does(submit: Submit, body: dict[str, Any]) -> None:
    agree(submit, body)


# --- the admin API's bodies ----------------------------------------------------------------------

ADMIN_TOKEN = "agreement-admin-token-" + "a" * 32
ADMIN_BODIES = {
    "ReplayFilter": ("POST", "/admin/v1/dead-letters/replay"),
    "Mute": ("PUT", "/admin/v1/notification-mutes/{kind}"),
    "Channel": ("PUT", "/admin/v1/clients/shop/channel"),
    "ChangeOrigins": ("POST", "/admin/v1/clients/shop/origins"),
}
ADMIN_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(["submit", "relay", "caller", "system", "amqp", "redis", "https://shop.example", "", "x" * 201]),
    st.sampled_from([None, 0, 1, 5.0, 5.5, -1, 10**9 + 1, True, [], ["https://shop.example", "ftp://x"], {}]),
    st.text(max_size=5),
)


@pytest.fixture(scope="module")
def admin(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> FlaskClient:
    app = in_process_app(migrated_template, tmp_path_factory.mktemp("agreement-admin"), LIAISON_ADMIN_TOKEN=ADMIN_TOKEN)
    with app.extensions["liaison"].db.transaction() as session:
        create_client(session, "shop", "https://shop.example/cb", ("https://shop.example",))
    return app.test_client()


@SETTINGS
@given(
    st.sampled_from(sorted(ADMIN_BODIES)),
    st.dictionaries(
        st.sampled_from(["kind", "fault", "provider", "older_than_s", "limit", "by", "note", "channel", "add", "x"]),
        ADMIN_VALUES,
        max_size=3,
    ),
)
def test_the_document_takes_an_admin_body_exactly_when_the_server_does(
    admin: FlaskClient, model: str, body: dict[str, Any]
) -> None:
    method, route = ADMIN_BODIES[model]
    schema = jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{model}", "components": document()["components"]}
    )
    response = admin.open(
        route.format(kind=IncidentKind.ALL[0]),
        method=method,
        json=body,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    # 409: the state of the client (its origins), not the form of the body
    assert (response.status_code in (400, 422)) == (not schema.is_valid(body)), (model, body, response.get_json())
