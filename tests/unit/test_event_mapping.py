"""A vendor's own event bodies read through its profile's [events] (webhooks.events.MappedEvents)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.states import EventType
from webhooks.events import EventTooLarge, MalformedEvent, parse_event, parser_for
from wire.bounded_json import JsonLimits
from wire.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]
PARSE = parser_for(load_profile(str(ROOT / "docs" / "profiles" / "stripe-like.toml")))


def _event(type_: str, **obj: Any) -> bytes:
    return json.dumps({"id": "evt_1", "type": type_, "data": {"object": {"id": "job_7", **obj}}}).encode()


def test_each_type_means_what_the_profile_says() -> None:
    accepted = PARSE(_event("job.started"), None).event
    assert accepted is not None and (accepted.type, accepted.job_id) == (EventType.ACCEPTED, "job_7")
    finished = PARSE(_event("job.finished", state="DONE", result={"url": "u"}), None).event
    assert finished is not None and (finished.type, finished.status, finished.outcome) == (
        EventType.COMPLETED,
        "succeeded",
        {"url": "u"},
    )
    failed = PARSE(_event("job.finished", state="ERROR"), None).event
    assert failed is not None and failed.status == "failed"
    fixed = PARSE(_event("job.failed", state="DONE"), None).event  # completed:failed whatever the state says
    assert fixed is not None and fixed.status == "failed"
    canceled = PARSE(_event("job.canceled"), None).event
    assert canceled is not None and (canceled.type, canceled.status) == (EventType.COMPLETED, "canceled")
    progress = PARSE(_event("job.progress", progress=40), None).event
    assert progress is not None and progress.progress is not None and progress.progress.percent == 40.0


def test_an_unknown_type_is_no_event_and_no_error() -> None:
    parsed = PARSE(_event("invoice.paid"), None)
    assert parsed.event is None and parsed.vendor_type == "invoice.paid"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[]", "nothing at /type"),
        (json.dumps({"type": "job.started"}).encode(), "nothing at /data/object/id"),
        (json.dumps({"type": 1.5}).encode(), "must be a string"),
        (_event("job.finished", state="RUNNING"), "final state"),  # not a final state
        (_event("job.finished", state="WHAT"), "final state"),  # not in [statuses]
        (_event("job.finished", state="DONE", result=[1]), "must be an object"),
        (_event("job.progress", progress=140), "percent"),
        (json.dumps({"type": "job.started", "data": {"object": {"id": "x" * 201}}}).encode(), "at most 200"),
    ],
)
def test_a_body_the_profile_cannot_read_is_malformed(body: bytes, why: str) -> None:
    with pytest.raises(MalformedEvent, match=why):
        PARSE(body, None)


def test_the_outcome_stays_bounded() -> None:
    big = _event("job.finished", state="DONE", result={"x": "y" * 2000})
    with pytest.raises(EventTooLarge):
        PARSE(big, JsonLimits(max_bytes=1000))
    deep: Any = {}
    for _ in range(40):
        deep = {"d": deep}
    with pytest.raises(MalformedEvent):
        PARSE(_event("job.finished", state="DONE", result=deep), JsonLimits(max_depth=8))


def test_without_a_profile_the_shape_is_liaisons() -> None:
    body = json.dumps({"type": "job.accepted", "job_id": "j"}).encode()
    assert parser_for(None)(body, None).event == parse_event(body)
