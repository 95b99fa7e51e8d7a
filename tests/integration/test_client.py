"""liaison_client against the real stack: submit, get, list, cancel through it, its typed errors
from real problem+json answers, and a callback the relay really delivered, verified with
``verify_callback`` (the standardwebhooks library)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import select, update

from liaison_client import (
    Callback,
    CallbackVerificationError,
    Conflict,
    LiaisonClient,
    NotFound,
    Task,
    TooManyRequests,
    Unauthorized,
    ValidationFailed,
    verify_callback,
)
from models.base import utcnow
from models.client import Client
from models.store import store_of
from models.task import ExternalTask, TaskEvent
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def tenant(pair_stack: Stack) -> Iterator[tuple[LiaisonClient, str, str]]:
    """(client, callback secret, callback path) of a fresh Liaison client. Afterwards, waits for the
    test's tasks to end and their callbacks to arrive: no relay is left running when the stack stops."""
    api_key, secret, path = pair_stack.new_client()
    with LiaisonClient(pair_stack.web.url, api_key, timeout=10) as client:
        yield client, secret, path
        _settle(pair_stack, client, path)


def _settle(stack: Stack, client: LiaisonClient, path: str) -> None:
    deadline = time.monotonic() + 60
    while not all(t.is_final for t in client.iter_tasks()):
        assert time.monotonic() < deadline, "tasks did not end"
        time.sleep(0.2)
    ended = len(list(client.iter_tasks()))
    stack.callbacks.wait_for(
        lambda reqs: sum(r.path == path and r.json()["type"] == "task.completed" for r in reqs) >= ended,
        timeout=60,
        message="every task.completed callback",
    )


def _wait(stack: Stack, client: LiaisonClient, correlation_id: str, state: str) -> Task:
    """Poll through the client until the task is in ``state`` (generous timeout, no timing asserted)."""

    def reached(body: dict[str, object]) -> bool:
        return body["state"] == state

    stack.wait_for_task(_key(client), correlation_id, until=reached, timeout=30)
    return client.get(correlation_id)


def _key(client: LiaisonClient) -> str:
    return client._headers["Authorization"].removeprefix("Bearer ")


def test_submit_get_list_and_a_verified_callback(pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]) -> None:
    client, secret, path = tenant
    cid = f"client-{uuid.uuid4().hex[:10]}"
    task = client.submit({"report": "q3"}, correlation_id=cid, idempotency_key=cid, execution_timeout_s=3600)
    assert isinstance(task, Task) and task.correlation_id == cid and task.state == "requested"
    assert task.execution_deadline is not None and task.execution_deadline.tzinfo is not None
    # The same key and body again: the same task, not a second one.
    assert (
        client.submit({"report": "q3"}, correlation_id=cid, idempotency_key=cid, execution_timeout_s=3600).created_at
        == task.created_at
    )

    done = _wait(pair_stack, client, cid, "succeeded")
    assert done.is_final and done.outcome is not None
    assert "state.succeeded" in [e.kind for e in done.timeline]

    page = client.list(state="succeeded", limit=200)
    assert cid in [t.correlation_id for t in page.tasks]
    assert all(t.state == "succeeded" for t in page.tasks)

    # The callback the relay delivered to this client's domain app, checked with the library.
    posts = pair_stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json()["type"] == "task.completed" for r in reqs),
        timeout=30,
        message="task.completed callback",
    )
    completed = next(r for r in posts if r.path == path and r.json()["type"] == "task.completed")
    callback = verify_callback([secret], completed.headers, completed.body)
    assert isinstance(callback, Callback)
    assert (callback.type, callback.correlation_id, callback.state) == ("task.completed", cid, "succeeded")
    assert callback.message_id == completed.headers["webhook-id"] and callback.outcome == done.outcome
    # Another client's secret does not verify it.
    _, other_secret, _ = pair_stack.new_client()
    with pytest.raises(CallbackVerificationError):
        verify_callback([other_secret], completed.headers, completed.body)


def test_iter_tasks_walks_every_page(pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]) -> None:
    client, _, _ = tenant
    ids = [client.submit({"n": n}).correlation_id for n in range(3)]
    first = client.list(limit=2)
    assert len(first.tasks) == 2 and first.next_cursor is not None
    assert [t.correlation_id for t in client.iter_tasks(page_size=1)] == ids[::-1]  # newest first


def test_a_long_timeline_is_read_whole_through_its_pages(
    pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]
) -> None:
    """A task with more timeline entries than ``GET`` shows: ``get`` has the oldest 200 and a
    cursor, ``iter_timeline`` every entry once, in order (the extra entries written straight to the
    stack's database, as 450 vendor events would have been). Its relay may still add an entry after
    ours: what the client read is compared with the database read after it, a prefix of it."""
    client, _, _ = tenant
    done = _wait(pair_stack, client, client.submit({"n": 1}).correlation_id, "succeeded")
    name = pair_stack.client_name(_key(client))
    with pair_stack.db.transaction() as session:
        task_id = session.scalar(
            select(ExternalTask.id).where(
                ExternalTask.correlation_id == done.correlation_id, ExternalTask.client.has(Client.name == name)
            )
        )
        assert task_id is not None
        for n in range(450):
            store_of(session).timeline.add(session, task_id, "event.progress", utcnow(), {"n": n})
    got = client.get(done.correlation_id)
    entries = list(client.iter_timeline(done.correlation_id, page_size=170))
    rest = client.timeline(done.correlation_id, cursor=got.timeline_next_cursor, limit=500)
    with pair_stack.db.transaction() as session:
        kinds = select(TaskEvent.kind).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id)
        stored = list(session.scalars(kinds))
    assert len(got.timeline) == 200 and got.timeline_next_cursor is not None
    assert [e.kind for e in got.timeline] == stored[:200]
    assert len(entries) > 450 and [e.kind for e in entries] == stored[: len(entries)]
    assert [e.detail["n"] for e in entries if e.kind == "event.progress"] == list(range(450))
    assert [e.kind for e in got.timeline + rest.entries] == stored[: 200 + len(rest.entries)]
    assert len(rest.entries) >= len(entries) - 200


def test_cancel_and_cancel_of_a_final_task(pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]) -> None:
    client, _, _ = tenant
    slow = client.submit({"simulate": {"complete_delay_s": 120}}, correlation_id=f"slow-{uuid.uuid4().hex[:8]}")
    canceled = client.cancel(slow.correlation_id, reason="changed our mind", idempotency_key=f"c-{slow.correlation_id}")
    assert canceled.state in ("cancel_requested", "canceled")
    assert _wait(pair_stack, client, slow.correlation_id, "canceled").is_final
    with pytest.raises(Conflict) as exc:
        client.cancel(slow.correlation_id)
    assert exc.value.status == 409 and exc.value.state == "canceled"


def test_typed_errors_from_real_answers(pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]) -> None:
    client, _, _ = tenant
    with pytest.raises(ValidationFailed) as invalid:
        client.submit({"x": 1}, correlation_id="not valid!", provider="nobody")
    assert invalid.value.status == 422
    assert set(invalid.value.fields()) == {"correlation_id", "provider"}

    with pytest.raises(NotFound) as missing:
        client.get(f"nothing-{uuid.uuid4().hex}")
    assert missing.value.status == 404 and missing.value.title == "Not Found"

    key = f"k-{uuid.uuid4().hex}"
    client.submit({"v": 1}, idempotency_key=key)
    with pytest.raises(Conflict) as reused:
        client.submit({"v": 2}, idempotency_key=key)
    assert reused.value.status == 409

    with LiaisonClient(pair_stack.web.url, "lk_not_a_key") as stranger, pytest.raises(Unauthorized):
        stranger.list()


def test_a_rate_limited_submit_says_when_to_retry(pair_stack: Stack, tenant: tuple[LiaisonClient, str, str]) -> None:
    client, _, _ = tenant
    with pair_stack.db.transaction() as session:
        session.execute(
            update(Client)
            .where(Client.name == pair_stack.client_name(_key(client)))
            .values(submit_rate_per_s=0.01, submit_burst=1)
        )
    client.submit({"n": 1})
    with pytest.raises(TooManyRequests) as exc:
        client.submit({"n": 2})
    assert exc.value.status == 429 and exc.value.limit == "submit_rate"
    assert exc.value.retry_after == 100.0  # 1 / 0.01 s
