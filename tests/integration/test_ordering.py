"""Ordered callbacks per task (issue 12): a later callback waits while an earlier one retries, a
dead-lettered one lets it through, progress is coalesced, a replayed completion supersedes.

Every test reads what the pretend domain app saw, in the order it arrived. ``-s`` prints it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from core.states import EventType
from models.base import utcnow
from models.messages import OutboxKind, OutboxMessage
from service.claims import claim_outbox
from service.ordering import hold
from service.transitions import mark_done
from service.vendor_events import receive_event
from tests.integration.stack import Stack
from tests.middle.builders import at_vendor, new_client
from tests.support.servers import RecordedRequest
from webhooks.events import Progress, VendorEvent


def _seen(posts: list[RecordedRequest]) -> list[tuple[int, str, Any, str | None]]:
    """(status answered, type, sequence, state) of every POST, in arrival order."""
    return [(r.status, r.json()["type"], r.json().get("sequence"), r.json().get("state")) for r in posts]


def _delivered(posts: list[RecordedRequest]) -> list[dict[str, Any]]:
    return [r.json() for r in posts if 200 <= r.status < 300]


def test_a_failing_domain_app_still_receives_accepted_before_completed(pair_stack: Stack) -> None:
    """The domain app answers 500 to its first two deliveries: ``task.accepted`` is retried, and the
    completion, which comes while it is undelivered, is held until the acceptance is delivered.

    The app holds its first answer until the test has seen the completion held (or 2.5 s passed,
    under the 3 s relay deadline): the vendor's completion then always comes while the acceptance is
    open, whatever the machine's pace (CI once saw the simulator complete after the third try)."""
    api_key, _, path = pair_stack.new_client()
    pair_stack.callbacks.set_status(path, [500, 500])
    gate = pair_stack.callbacks.hold(path, at_most_s=2.5)
    cid = f"ordered-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"accept_delay_s": 0.2, "complete_delay_s": 0.3}}}
    assert pair_stack.submit(api_key, body).status_code == 202

    def held() -> list[dict[str, Any]]:
        return [e["detail"] for e in pair_stack.get(api_key, cid)["timeline"] if e["kind"] == "relay.waiting"]

    deadline = time.monotonic() + 2.5
    while not held() and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.set()
    pair_stack.callbacks.wait_for(lambda _: len(_delivered(pair_stack.callbacks.posts_to(path))) == 2, timeout=20)
    time.sleep(0.5)  # nothing more may arrive
    posts = pair_stack.callbacks.posts_to(path)
    print(f"\n{pair_stack.name}: the domain app saw {_seen(posts)}")
    delivered = _delivered(posts)
    assert [(d["type"], d["sequence"], d["state"]) for d in delivered] == [
        ("task.accepted", 1, "accepted"),
        ("task.completed", 2, "succeeded"),
    ]
    assert [status for status, *_ in _seen(posts)] == [500, 500, 204, 204]
    # every attempt, failed or not, in sequence order: the completion was never tried early
    sequences = [seq for _, _, seq, _ in _seen(posts)]
    assert sequences == sorted(sequences)
    assert [(h["type"], h["sequence"]) for h in held()] == [("task.completed", 2)]  # it was held, not late


def test_a_dead_lettered_earlier_callback_lets_the_later_one_through(pair_stack: Stack) -> None:
    """``task.accepted`` fails every attempt (the test policy allows 4) and is dead-lettered; the
    completion, held behind it meanwhile, then goes, and the gap (sequence 1) is on the timeline."""
    api_key, _, path = pair_stack.new_client()
    pair_stack.callbacks.set_status(path, [500, 500, 500, 500])
    cid = f"gap-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"accept_delay_s": 0.2, "complete_delay_s": 0.3}}}
    assert pair_stack.submit(api_key, body).status_code == 202
    pair_stack.callbacks.wait_for(lambda _: len(_delivered(pair_stack.callbacks.posts_to(path))) == 1, timeout=20)
    time.sleep(0.5)
    posts = pair_stack.callbacks.posts_to(path)
    print(f"\n{pair_stack.name}: the domain app saw {_seen(posts)}")
    assert _seen(posts) == [*[(500, "task.accepted", 1, "accepted")] * 4, (204, "task.completed", 2, "succeeded")]
    timeline = pair_stack.get(api_key, cid)["timeline"]
    kinds = [e["kind"] for e in timeline]
    assert kinds.index("relay.dead_lettered") < kinds.index("relay.delivered")
    [gap] = [e["detail"] for e in timeline if e["kind"] == "relay.gap"]
    assert (gap["sequence"], gap["type"], gap["reason"]) == (1, "task.accepted", "dead_lettered")
    assert [e["detail"]["sequence"] for e in timeline if e["kind"] == "relay.waiting"] == [2]


def test_progress_is_coalesced_while_the_endpoint_holds_a_callback(pair_stack: Stack) -> None:
    """Nine reports arrive while the domain app holds the acceptance (it answers once the test has
    seen every report recorded, or after 2.5 s, under the 3 s relay deadline): the progress callback
    waiting behind it took the later ones in (the newest report received wins), none came after the
    completion, and the sequence still only grows. Slow by construction, not by the machine's pace."""
    api_key, _, path = pair_stack.new_client()
    gate = pair_stack.callbacks.hold(path, at_most_s=2.5)
    cid = f"progress-{uuid.uuid4().hex[:8]}"
    reports = [10, 20, 30, 40, 50, 60, 70, 80, 90]
    knobs = {"accept_delay_s": 0.1, "progress": reports, "progress_interval_s": 0.05, "complete_delay_s": 1.0}
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": knobs}}).status_code == 202

    def received() -> list[dict[str, Any]]:
        return [e["detail"] for e in pair_stack.get(api_key, cid)["timeline"] if e["kind"] == "event.progress"]

    deadline = time.monotonic() + 2.5
    while len(received()) < len(reports) and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.set()
    pair_stack.callbacks.wait_for(
        lambda _: any(d["type"] == "task.completed" for d in _delivered(pair_stack.callbacks.posts_to(path))),
        timeout=30,
    )
    time.sleep(1.0)
    delivered = _delivered(pair_stack.callbacks.posts_to(path))
    print(
        f"\n{pair_stack.name}: the domain app saw {[(d['type'], d['sequence'], d.get('percent')) for d in delivered]}"
    )
    assert [d["sequence"] for d in delivered] == list(range(1, len(delivered) + 1))  # no gap, in order
    assert delivered[0]["type"] == "task.accepted" and delivered[-1]["type"] == "task.completed"
    assert [status for status, *_ in _seen(pair_stack.callbacks.posts_to(path))] == [204] * len(delivered)
    progress = [d for d in delivered if d["type"] == "task.progress"]
    assert 1 <= len(progress) < len(reports)  # coalesced
    recorded = received()
    assert len(recorded) == len(reports)  # every report was received and recorded
    last = recorded[-1]["percent"]  # the newest report received wins
    assert progress[-1]["percent"] == last and progress[-1]["message"] == f"{last:g}% done"
    assert [p["percent"] for p in progress] == sorted(p["percent"] for p in progress)
    assert all(p["state"] == "accepted" for p in progress)
    assert sum(r["coalesced"] for r in recorded) == len(reports) - len(progress)


def test_a_replayed_completion_supersedes_the_earlier_one(pair_stack: Stack) -> None:
    """The submission fails for good (the vendor answers 503 six times): ``task.completed``/failed
    is sent. Replayed, the task completes for real: that completion carries a higher sequence and
    names the failed one in ``supersedes``."""
    api_key, _, path = pair_stack.new_client()
    cid = f"supersede-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"transient_failures": 6, "complete_delay_s": 0.2}}}
    assert pair_stack.submit(api_key, body).status_code == 202
    failed = pair_stack.wait_for_task(api_key, cid, timeout=30)
    assert failed["state"] == "failed"
    pair_stack.callbacks.wait_for(lambda _: len(_delivered(pair_stack.callbacks.posts_to(path))) == 1, timeout=10)
    letter_id = failed["outcome"]["dead_letter_id"]
    assert pair_stack.admin("POST", f"/dead-letters/{letter_id}/replay").status_code == 202
    pair_stack.callbacks.wait_for(lambda _: len(_delivered(pair_stack.callbacks.posts_to(path))) == 3, timeout=20)
    delivered = _delivered(pair_stack.callbacks.posts_to(path))
    print(f"\n{pair_stack.name}: {[(d['type'], d['sequence'], d['state'], d['supersedes']) for d in delivered]}")
    first, accepted, final = delivered
    assert (first["type"], first["sequence"], first["state"], first["supersedes"]) == (
        "task.completed",
        1,
        "failed",
        None,
    )
    assert (accepted["type"], accepted["sequence"], accepted["supersedes"]) == ("task.accepted", 2, None)
    assert (final["type"], final["sequence"], final["state"]) == ("task.completed", 3, "succeeded")
    assert final["supersedes"] == first["message_id"]


def test_one_tasks_stuck_callback_never_delays_another_tasks(pair_stack: Stack) -> None:
    """Two tasks of one client: the first's callback URL answers 500 to everything, so its
    ``task.accepted`` retries and its completion waits; the second's callbacks all arrive meanwhile."""
    api_key, _, path = pair_stack.new_client()
    stuck_path = path + "-stuck"
    pair_stack.callbacks.set_status(stuck_path, 500)
    stuck, free = f"stuck-{uuid.uuid4().hex[:8]}", f"free-{uuid.uuid4().hex[:8]}"
    quick = {"accept_delay_s": 0.1, "complete_delay_s": 0.2}
    stuck_url = pair_stack.callback_server.url + stuck_path
    body = {"correlation_id": stuck, "callback_url": stuck_url, "input": {"simulate": quick}}
    assert pair_stack.submit(api_key, body).status_code == 202
    pair_stack.callbacks.wait_for(lambda _: len(pair_stack.callbacks.posts_to(stuck_path)) >= 2, timeout=10)
    assert pair_stack.submit(api_key, {"correlation_id": free, "input": {"simulate": quick}}).status_code == 202
    pair_stack.callbacks.wait_for(lambda _: len(_delivered(pair_stack.callbacks.posts_to(path))) == 2, timeout=10)
    stuck_posts = pair_stack.callbacks.posts_to(stuck_path)
    assert {r.json()["sequence"] for r in stuck_posts} == {1}  # still retrying its first
    assert [(d["type"], d["sequence"]) for d in _delivered(pair_stack.callbacks.posts_to(path))] == [
        ("task.accepted", 1),
        ("task.completed", 2),
    ]
    pair_stack.callbacks.set_status(stuck_path, 204)  # let the stuck one finish (or be dead-lettered)


def test_a_release_waits_for_a_webhook_coalescing_into_the_held_relay(pair_stack: Stack) -> None:
    """A progress report coalesced into a held relay locks it in the webhook's transaction; the earlier
    relay, settled at that moment, must wait for that lock and release it, not pass it over (it was
    passed over with ``SKIP LOCKED`` once, and the callbacks stalled until the sweep's recheck).
    Two plain sessions on the stack's database, no hook, nothing published: only the rows are read."""
    engine = pair_stack.db.engine
    job, first_id, second_id = _two_relays(engine, lambda job: _progress(job, 10))
    with Session(engine) as session, session.begin():
        held = session.get(OutboxMessage, second_id)
        assert held is not None
        assert hold(session, held, first_id, utcnow(), recheck_s=600)

    with Session(engine) as webhook:
        webhook.begin()
        coalesced = receive_event(webhook, "sim", f"wh-{job}-3", _progress(job, 20), utcnow())
        assert coalesced.status == "applied" and coalesced.outbox == []  # merged into the held relay

        def deliver_first() -> None:
            with Session(engine) as session, session.begin():
                row = claim_outbox(session, first_id)
                assert row is not None and row.holds_back
                mark_done(session, row, utcnow(), "relay.delivered")

        settling = threading.Thread(target=deliver_first)
        settling.start()
        settling.join(timeout=1.0)
        assert settling.is_alive()  # waiting for the webhook's lock on the held relay
        webhook.commit()
        settling.join(timeout=10)
        assert not settling.is_alive()

    with Session(engine) as session:
        released = session.get(OutboxMessage, second_id)
        assert released is not None
        assert (released.parked_reason, released.next_attempt_at, released.payload["percent"]) == (None, None, 20.0)
        assert released.dispatched_at is not None  # stamped: published at the settling commit


def test_a_relay_start_never_waits_for_the_earlier_relay_it_would_hold_behind(pair_stack: Stack) -> None:
    """The other half of the release's wait: a relay's start holds its own row, so it must not wait
    for the earlier one (whose settling may be waiting for it): a locked earlier row is "look again"."""
    if pair_stack.db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises writers: there is no row lock to wait for or to skip")
    engine = pair_stack.db.engine
    _, first_id, second_id = _two_relays(engine, lambda job: VendorEvent(EventType.COMPLETED, job, "succeeded", {}))
    with Session(engine) as settling, settling.begin():
        assert claim_outbox(settling, first_id) is not None  # the earlier relay, being settled
        with Session(engine) as start, start.begin():
            second = claim_outbox(start, second_id)
            assert second is not None
            began = time.monotonic()
            assert not hold(start, second, first_id, utcnow(), recheck_s=600)
            assert time.monotonic() - began < 1.0  # answered at once, not after the settling commit
    with Session(engine) as session, session.begin():
        held = session.get(OutboxMessage, second_id)
        assert held is not None
        assert hold(session, held, first_id, utcnow(), recheck_s=600)


def _two_relays(engine: Engine, second: Callable[[str], VendorEvent]) -> tuple[str, int, int]:
    """A task at the vendor, accepted and then told ``second(job)``: (its job id, the ids of its two
    relay rows), written by plain sessions (nothing published)."""
    job = f"job-{uuid.uuid4().hex[:8]}"
    with Session(engine, expire_on_commit=False) as session, session.begin():
        task = at_vendor(session, new_client(session), f"held-{job}", job, now=utcnow())
        receive_event(session, "sim", f"wh-{job}-1", VendorEvent(EventType.ACCEPTED, job), utcnow())
        receive_event(session, "sim", f"wh-{job}-2", second(job), utcnow())
        first_id, second_id = session.scalars(
            select(OutboxMessage.id)
            .where(OutboxMessage.task_id == task.id, OutboxMessage.kind == OutboxKind.RELAY)
            .order_by(OutboxMessage.sequence)
        ).all()
    return job, first_id, second_id


def _progress(job: str, percent: float) -> VendorEvent:
    return VendorEvent(EventType.PROGRESS, job, progress=Progress(percent, f"{percent:g}%"))
