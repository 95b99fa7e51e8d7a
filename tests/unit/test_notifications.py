"""The notification rule over plain data: once each, alone while calm, one digest in a burst."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from core.notifications import (
    CHAT,
    EMAIL,
    OPENED,
    RESOLVED,
    DigestRule,
    Message,
    Notice,
    chat_body,
    for_channel,
    notice_key,
    parse_routes,
    payload,
    plan,
    routed,
    text,
)

T0 = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
RULE = DigestRule(threshold=3, window_s=60)


def notice(i: int, at: datetime = T0, kind: str = "submit_failed", phase: str = OPENED) -> Notice:
    return Notice(i, notice_key(kind, f"outbox:{i}", at, phase), kind, f"outbox:{i}", phase, "detail", at)


def test_the_key_is_stable_and_names_the_phase_and_the_opening() -> None:
    key = notice_key("submit_failed", "outbox:1", T0, OPENED)
    assert key == notice_key("submit_failed", "outbox:1", T0, OPENED)
    assert key != notice_key("submit_failed", "outbox:1", T0, RESOLVED)
    # the same subject opened again later (after a resolution) is a new incident: a new notice
    assert key != notice_key("submit_failed", "outbox:1", T0 + timedelta(seconds=1), OPENED)


def test_calm_notices_go_out_alone() -> None:
    messages = plan([notice(1), notice(2)], sent_in_window=1, now=T0, rule=RULE)
    assert [m.notices[0].id for m in messages] == [1, 2]
    assert not any(m.digest for m in messages)


def test_a_burst_is_held_then_sent_as_one_digest() -> None:
    burst = [notice(i, T0 + timedelta(milliseconds=60 * i)) for i in range(1000)]
    assert plan(burst, 0, T0 + timedelta(seconds=59), RULE) == []
    (digest,) = plan(burst, 0, T0 + timedelta(seconds=60), RULE)
    assert digest.digest and len(digest.notices) == 1000
    assert "1000 notices" in text(digest) and "… and 950 more" in text(digest)


def test_past_the_threshold_even_one_notice_waits_for_the_window() -> None:
    assert plan([notice(1)], sent_in_window=3, now=T0, rule=RULE) == []
    (alone,) = plan([notice(1)], sent_in_window=3, now=T0 + timedelta(seconds=60), rule=RULE)
    assert not alone.digest


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0, max_value=30), min_size=1, max_size=120),
    interval=st.sampled_from([1.0, 10.0, 15.0]),
    threshold=st.integers(min_value=1, max_value=6),
)
def test_every_notice_goes_once_soon_and_no_window_floods(gaps: list[float], interval: float, threshold: int) -> None:
    """Arrivals at any pace, dispatched every ``interval``: each notice is in exactly one message,
    sent within a window and an interval of its arrival; no window holds more than threshold + 1
    messages (the singles the threshold allows, and at most one digest)."""
    rule = DigestRule(threshold=threshold, window_s=60)
    arrivals, at = [], T0
    for i, gap in enumerate(gaps):
        at += timedelta(seconds=gap)
        arrivals.append(notice(i, at))
    pending: list[Notice] = []
    sent: list[tuple[datetime, Message]] = []
    now, i = T0, 0
    while i < len(arrivals) or pending:
        now += timedelta(seconds=interval)
        while i < len(arrivals) and arrivals[i].occurred_at <= now:
            pending.append(arrivals[i])
            i += 1
        recent = sum(1 for when, _ in sent if when > now - timedelta(seconds=rule.window_s))
        for message in plan(pending, recent, now, rule):
            sent.append((now, message))
            pending = [n for n in pending if n not in message.notices]
    ids = [n.id for _, m in sent for n in m.notices]
    assert sorted(ids) == list(range(len(arrivals)))
    for when, message in sent:
        for n in message.notices:
            assert when - n.occurred_at <= timedelta(seconds=rule.window_s + interval)
        in_window = [w for w, _ in sent if when - timedelta(seconds=rule.window_s) < w <= when]
        assert len(in_window) <= threshold + 1


def test_routes() -> None:
    assert parse_routes("") is None
    assert parse_routes(" * ") == frozenset({"*"})
    every, some = parse_routes("*"), parse_routes("submit_failed, deadline_exceeded")
    assert routed("relay_failed", every) and not routed("relay_failed", some)
    assert routed("deadline_exceeded", some) and not routed("deadline_exceeded", None)
    assert not routed("notification_failed", every)  # a failed notice is never itself notified


def test_a_channel_gets_only_its_kinds() -> None:
    mixed = (notice(1, kind="submit_failed"), notice(2, kind="relay_failed"))
    digest = Message("k", mixed)
    part = for_channel(digest, frozenset({"relay_failed"}))
    assert part is not None and [n.id for n in part.notices] == [2] and not part.digest
    assert for_channel(digest, frozenset({"unknown_job"})) is None
    assert for_channel(digest, frozenset({"*"})) is digest


def test_strings_from_outside_cannot_become_chat_markup() -> None:
    hostile = Notice(1, "k", "submit_failed", "<!channel> <https://evil|click>", OPENED, "<script>x</script>", T0)
    body = chat_body(Message("k", (hostile,)))
    section = body["blocks"][1]["text"]["text"]
    assert "<" not in section and "&lt;!channel&gt;" in section


def test_the_payload_carries_what_each_channel_sends() -> None:
    message = Message("k", (notice(1),))
    mail = payload(EMAIL, message)
    assert mail["subject"].startswith("[Liaison] incident: submit_failed") and "outbox:1" in mail["text"]
    chat = payload(CHAT, message)
    assert chat["body"]["text"] == mail["subject"] and chat["digest"] is False
