"""liaison_client without a server: requests it builds, answers it parses, errors it maps, callbacks
it verifies. HTTP goes through a stub ``requests`` adapter (the real server: tests/integration/test_client.py)."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from requests.adapters import BaseAdapter
from standardwebhooks.webhooks import Webhook

from liaison_client import (
    Callback,
    CallbackVerificationError,
    Conflict,
    Forbidden,
    LiaisonClient,
    NotFound,
    ProblemError,
    Task,
    TooManyRequests,
    TransportError,
    Unauthorized,
    UnexpectedResponse,
    ValidationFailed,
    verify_callback,
)
from liaison_client.errors import parse_retry_after
from webhooks.signing import SECRET_PREFIX, sign

ROOT = Path(__file__).resolve().parents[2]
SECRET = SECRET_PREFIX + base64.b64encode(bytes(range(32))).decode()
OLD_SECRET = SECRET_PREFIX + base64.b64encode(bytes(range(64, 96))).decode()
TASK = {
    "correlation_id": "order-42",
    "state": "requested",
    "provider": "sim",
    "input": {"sku": "A1"},
    "outcome": None,
    "callback_url": "https://shop.example/cb",
    "acceptance_deadline": None,
    "execution_deadline": "2030-01-01T12:00:00Z",
    "on_deadline": "escalate",
    "attempts": 0,
    "retrying": False,
    "last_error": None,
    "next_attempt_at": None,
    "created_at": "2029-12-31T12:00:00.123456Z",
    "updated_at": "2029-12-31T12:00:00.123456Z",
}

Answer = tuple[int, Any, dict[str, str]]


class StubAdapter(BaseAdapter):
    """Answers every request with ``answer(request)``; keeps what was sent."""

    def __init__(self, answer: Callable[[requests.PreparedRequest], Answer]) -> None:
        super().__init__()
        self.answer = answer
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(request)
        status, body, headers = self.answer(request)
        response = requests.Response()
        response.status_code = status
        response.reason = {200: "OK", 202: "Accepted", 502: "Bad Gateway"}.get(status, "")
        response._content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response.headers.update(headers)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


def client_with(answer: Callable[[requests.PreparedRequest], Answer]) -> tuple[LiaisonClient, StubAdapter]:
    session = requests.Session()
    adapter = StubAdapter(answer)
    session.mount("http://", adapter)
    return LiaisonClient("http://liaison.test/", "lk_secret_key", session=session), adapter


def problem(
    status: int, title: str, headers: dict[str, str] | None = None, **extra: Any
) -> Callable[[requests.PreparedRequest], Answer]:
    def answer(_: requests.PreparedRequest) -> Answer:
        body = {"type": "about:blank", "title": title, "status": status, **extra}
        return status, body, {"Content-Type": "application/problem+json", **(headers or {})}

    return answer


def test_submit_sends_only_the_given_fields_and_parses_the_task() -> None:
    client, adapter = client_with(lambda r: (202, TASK, {"Location": "/api/v1/tasks/order-42"}))
    task = client.submit(
        {"sku": "A1"},
        correlation_id="order-42",
        idempotency_key="k-1",
        execution_deadline=datetime(2030, 1, 1, 12, tzinfo=UTC),
        on_deadline="cancel",
        heartbeat_timeout_s=600,
        priority=1,
        concurrency_key="account-7",
    )
    sent = adapter.sent[0]
    assert (sent.method, sent.url) == ("POST", "http://liaison.test/api/v1/tasks")
    assert sent.headers["Authorization"] == "Bearer lk_secret_key"
    assert sent.headers["Idempotency-Key"] == "k-1"
    assert json.loads(cast(bytes, sent.body or b"")) == {  # the client sends its JSON as bytes
        "input": {"sku": "A1"},
        "correlation_id": "order-42",
        "execution_deadline": "2030-01-01T12:00:00+00:00",
        "on_deadline": "cancel",
        "heartbeat_timeout_s": 600,
        "priority": 1,
        "concurrency_key": "account-7",
    }
    assert task.correlation_id == "order-42" and task.state == "requested" and not task.is_final
    assert task.execution_deadline == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert task.created_at is not None and task.created_at.tzinfo is not None
    assert task.timeline == () and task.raw == TASK


def test_a_waiting_task_says_why() -> None:
    waiting = {"reason": "vendor_capacity", "description": "waiting for vendor capacity", "since": None}
    client, _ = client_with(lambda r: (200, {**TASK, "priority": 1, "waiting": waiting}, {}))
    task = client.get("order-42")
    assert (task.priority, task.concurrency_key, task.waiting) == (1, None, waiting)


def test_get_quotes_the_id_and_reads_the_timeline() -> None:
    body = {
        **TASK,
        "state": "succeeded",
        "timeline": [{"at": "2030-01-01T00:00:00Z", "kind": "state.succeeded", "detail": {"previous": "accepted"}}],
    }
    client, adapter = client_with(lambda r: (200, body, {}))
    task = client.get("a/b c")
    assert adapter.sent[0].url == "http://liaison.test/api/v1/tasks/a%2Fb%20c"
    assert task.is_final and task.timeline[0].kind == "state.succeeded"
    assert task.timeline[0].detail == {"previous": "accepted"}


def test_cancel_sends_a_reason_only_when_given() -> None:
    client, adapter = client_with(lambda r: (202, {**TASK, "state": "cancel_requested"}, {}))
    assert client.cancel("order-42").state == "cancel_requested"
    client.cancel("order-42", reason="changed my mind", idempotency_key="c-1")
    first, second = adapter.sent
    assert first.url == "http://liaison.test/api/v1/tasks/order-42/cancel" and not first.body
    assert json.loads(cast(bytes, second.body or b"")) == {"reason": "changed my mind"}
    assert second.headers["Idempotency-Key"] == "c-1"


def test_list_and_iter_tasks_follow_the_cursor() -> None:
    pages = {None: ["t3", "t2"], "c1": ["t1"]}

    def answer(request: requests.PreparedRequest) -> Answer:
        query = dict(p.split("=") for p in (request.url or "").split("?")[1].split("&"))
        cursor = query.get("cursor")
        ids = pages[cursor]
        return (
            200,
            {"tasks": [{**TASK, "correlation_id": i} for i in ids], "next_cursor": "c1" if cursor is None else None},
            {},
        )

    client, adapter = client_with(answer)
    page = client.list(state="succeeded", limit=2)
    assert [t.correlation_id for t in page.tasks] == ["t3", "t2"] and page.next_cursor == "c1"
    assert "state=succeeded" in (adapter.sent[0].url or "") and "limit=2" in (adapter.sent[0].url or "")
    assert [t.correlation_id for t in client.iter_tasks(page_size=2)] == ["t3", "t2", "t1"]
    assert len(adapter.sent) == 3


@pytest.mark.parametrize(
    "status, cls",
    [
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (422, ValidationFailed),
        (429, TooManyRequests),
        (500, ProblemError),
    ],
)
def test_each_status_has_its_class(status: int, cls: type[ProblemError]) -> None:
    client, _ = client_with(problem(status, "Some Title", detail="what went wrong"))
    with pytest.raises(cls) as exc:
        client.get("x")
    assert type(exc.value) is cls
    assert (exc.value.status, exc.value.title, exc.value.detail) == (status, "Some Title", "what went wrong")


def test_a_422_lists_its_fields_and_a_409_its_state() -> None:
    client, _ = client_with(problem(422, "Unprocessable Content", errors=[{"field": "input", "message": "required"}]))
    with pytest.raises(ValidationFailed) as invalid:
        client.submit(None)
    assert invalid.value.errors == [{"field": "input", "message": "required"}]
    assert invalid.value.fields() == {"input": "required"}
    client, _ = client_with(problem(409, "Conflict", state="succeeded"))
    with pytest.raises(Conflict) as conflict:
        client.cancel("x")
    assert conflict.value.state == "succeeded" and conflict.value.extra == {"state": "succeeded"}


def test_a_429_says_when_to_retry() -> None:
    client, _ = client_with(problem(429, "Too Many Requests", limit="submit_rate", headers={"Retry-After": "7"}))
    with pytest.raises(TooManyRequests) as exc:
        client.submit({})
    assert exc.value.retry_after == 7.0 and exc.value.limit == "submit_rate"


def test_an_answer_that_is_no_problem_document_still_maps() -> None:
    client, _ = client_with(lambda r: (502, b"<html>bad gateway</html>", {"Content-Type": "text/html"}))
    with pytest.raises(ProblemError) as exc:
        client.get("x")
    assert (exc.value.status, exc.value.title, exc.value.detail) == (502, "Bad Gateway", None)


def test_a_2xx_that_is_not_a_task_is_unexpected() -> None:
    client, _ = client_with(lambda r: (200, b"<html>hello</html>", {}))
    with pytest.raises(UnexpectedResponse):
        client.get("x")
    client, _ = client_with(lambda r: (200, {"tasks": "nope"}, {}))
    with pytest.raises(UnexpectedResponse):
        client.list()


def test_no_answer_is_a_transport_error() -> None:
    def refuse(_: requests.PreparedRequest) -> Answer:
        raise requests.ConnectionError("connection refused")

    client, _ = client_with(refuse)
    with pytest.raises(TransportError):
        client.get("x")


def test_the_key_is_not_in_the_repr() -> None:
    assert "lk_secret_key" not in repr(LiaisonClient("http://liaison.test", "lk_secret_key"))


def test_retry_after_reads_seconds_and_dates() -> None:
    now = 1_900_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


# -- callbacks ---------------------------------------------------------------------------------

CALLBACK = {
    "message_id": "msg_1",
    "type": "task.completed",
    "correlation_id": "order-42",
    "sequence": 3,
    "state": "succeeded",
    "supersedes": "msg_0",
    "outcome": {"pdf": "r.pdf"},
    "occurred_at": "2030-01-01T12:00:00+00:00",
}
CALLBACK_BODY = json.dumps(CALLBACK, sort_keys=True, separators=(",", ":")).encode()


def relay_headers(secrets: list[str], body: bytes = CALLBACK_BODY, ts: float | None = None) -> dict[str, str]:
    """What the relay sends (workers.delivery signs with webhooks.signing)."""
    return sign(secrets, "msg_1", int(ts or time.time()), body).as_dict()


def test_a_relayed_callback_verifies_with_any_rotating_secret() -> None:
    headers = relay_headers([OLD_SECRET, SECRET])
    for held in ([SECRET], [OLD_SECRET], SECRET, (s for s in [OLD_SECRET, SECRET])):
        callback = verify_callback(held, headers, CALLBACK_BODY)
        assert isinstance(callback, Callback)
    assert callback.message_id == "msg_1" and callback.type == "task.completed"
    assert callback.correlation_id == "order-42" and callback.state == "succeeded"
    assert callback.outcome == {"pdf": "r.pdf"} and callback.occurred_at == datetime(2030, 1, 1, 12, tzinfo=UTC)
    assert (callback.sequence, callback.supersedes) == (3, "msg_0")
    assert callback.data == CALLBACK


def test_a_library_signed_callback_verifies() -> None:
    now = datetime.now(UTC)
    headers = {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": str(int(now.timestamp())),
        "Webhook-Signature": Webhook(SECRET).sign("msg_1", now, CALLBACK_BODY.decode()),
    }
    assert verify_callback([SECRET], headers, CALLBACK_BODY.decode()).correlation_id == "order-42"


@pytest.mark.parametrize(
    "case",
    [
        "wrong_secret",
        "tampered",
        "stale",
        "missing",
        "no_comma",
        "bad_base64",
        "not_utf8",
        "not_json",
        "not_a_callback",
    ],
)
def test_every_bad_callback_is_a_verification_error(case: str) -> None:
    body, headers, secrets = CALLBACK_BODY, relay_headers([SECRET]), [SECRET]
    if case == "wrong_secret":
        secrets = [OLD_SECRET]
    elif case == "tampered":
        body = body.replace(b"succeeded", b"failed")
    elif case == "stale":
        headers = relay_headers([SECRET], ts=time.time() - 301)
    elif case == "missing":
        del headers["webhook-signature"]
    elif case == "no_comma":
        headers["webhook-signature"] = "v1"  # the library itself raises ValueError on this
    elif case == "bad_base64":
        headers["webhook-signature"] = "v1,%%%"
    elif case == "not_utf8":
        body = b"\xff\xfe"
        headers = relay_headers([SECRET], body)
    elif case == "not_json":
        body = b"not json"
        headers = relay_headers([SECRET], body)
    elif case == "not_a_callback":
        body = b'{"type": "task.completed"}'
        headers = relay_headers([SECRET], body)
    with pytest.raises(CallbackVerificationError):
        verify_callback(secrets, headers, body)


@given(
    headers=st.dictionaries(
        st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature", "x"]), st.text(max_size=40)
    ),
    body=st.binary(max_size=64),
)
def test_callback_verification_is_total(headers: dict[str, str], body: bytes) -> None:
    """Whatever arrives, the answer is a Callback or a CallbackVerificationError."""
    with contextlib.suppress(CallbackVerificationError):
        verify_callback([SECRET], headers, body)


@pytest.mark.parametrize("secret", ["not-a-secret", "whsec_%%%%", "whsec_"])
def test_a_malformed_secret_is_a_configuration_error_that_does_not_echo_it(secret: str) -> None:
    with pytest.raises(ValueError) as exc:
        verify_callback([secret], relay_headers([SECRET]), CALLBACK_BODY)
    assert not isinstance(exc.value, CallbackVerificationError)
    tail = secret.removeprefix("whsec_")
    assert not tail or tail not in str(exc.value)


def test_the_client_imports_nothing_of_the_server() -> None:
    """Installable on its own: importing it loads none of Liaison's packages (nor Flask, SQLAlchemy)."""
    code = "import sys, liaison_client; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.replace("'", '"')
    )
    assert "liaison_client" in loaded and "standardwebhooks" in loaded
    assert not {"app", "models", "workers", "runtime", "webhooks", "simulator", "flask", "sqlalchemy", "celery"} & set(
        loaded
    )


def test_a_long_timeline_is_read_a_page_at_a_time_from_the_tasks_cursor() -> None:
    """``get`` shows the start of a long timeline and its cursor; ``timeline`` pages on from it and
    ``iter_timeline`` reads it all, from the start."""
    entries = [{"at": "2030-01-01T00:00:00Z", "kind": "event.progress", "detail": {"n": n}} for n in range(5)]
    pages = {None: (entries[:2], "t2"), "t2": (entries[2:4], "t4"), "t4": (entries[4:], None)}

    def answer(request: requests.PreparedRequest) -> Answer:
        path, _, query_text = (request.url or "").partition("?")
        query = dict(p.split("=") for p in query_text.split("&") if p)
        if not path.endswith("/timeline"):
            return 200, {**TASK, "timeline": entries[:2], "timeline_next_cursor": "t2"}, {}
        shown, cursor = pages[query.get("cursor")]
        return 200, {"timeline": shown, "next_cursor": cursor}, {}

    client, adapter = client_with(answer)
    task = client.get("a/b")
    assert [e.detail["n"] for e in task.timeline] == [0, 1] and task.timeline_next_cursor == "t2"
    page = client.timeline("a/b", cursor=task.timeline_next_cursor, limit=2)
    assert [e.detail["n"] for e in page.entries] == [2, 3] and page.next_cursor == "t4"
    assert adapter.sent[1].url == "http://liaison.test/api/v1/tasks/a%2Fb/timeline?cursor=t2&limit=2"
    assert [e.detail["n"] for e in client.iter_timeline("a/b", page_size=2)] == [0, 1, 2, 3, 4]
    assert len(adapter.sent) == 5
    assert client.get("a/b").timeline_next_cursor == "t2"
    assert Task.from_json({**TASK, "timeline": []}).timeline_next_cursor is None  # an older server's task
