"""Ordered callbacks per task (issue 12): a later callback waits while an earlier one retries, a
dead-lettered one lets it through, progress is coalesced, a replayed completion supersedes.

Every test reads what the pretend domain app saw, in the order it arrived. ``-s`` prints it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.integration.stack import Stack
from tests.support.servers import RecordedRequest


def _seen(posts: list[RecordedRequest]) -> list[tuple[int, str, Any, str | None]]:
    """(status answered, type, sequence, state) of every POST, in arrival order."""
    return [(r.status, r.json()["type"], r.json().get("sequence"), r.json().get("state")) for r in posts]


def _delivered(posts: list[RecordedRequest]) -> list[dict[str, Any]]:
    return [r.json() for r in posts if 200 <= r.status < 300]


def test_a_failing_domain_app_still_receives_accepted_before_completed(pair_stack: Stack) -> None:
    """The domain app answers 500 to its first two deliveries: ``task.accepted`` is retried, and the
    completion, which comes while it waits, is held until the acceptance is delivered."""
    api_key, _, path = pair_stack.new_client()
    pair_stack.callbacks.set_status(path, [500, 500])
    cid = f"ordered-{uuid.uuid4().hex[:8]}"
    # completed ~0.3 s after accepted: while the acceptance waits for its second retry
    body = {"correlation_id": cid, "input": {"simulate": {"accept_delay_s": 0.2, "complete_delay_s": 0.3}}}
    assert pair_stack.submit(api_key, body).status_code == 202
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
    timeline = pair_stack.get(api_key, cid)["timeline"]
    held = [e["detail"] for e in timeline if e["kind"] == "relay.waiting"]
    assert [(h["type"], h["sequence"]) for h in held] == [("task.completed", 2)]  # it was held, not late
