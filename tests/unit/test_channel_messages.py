"""The channel messages, pure: command envelopes bounded like requests, names, rejections."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.validation import parse_submit
from app.errors import ValidationFailed
from foundation.provider_settings import ProviderSettings
from models.client import Client
from service.credentials import CredentialError, set_channel
from wire.channel_messages import (
    CANCEL_TASK,
    CHANNEL_NAME,
    SUBMIT_TASK,
    CommandRefused,
    cancel_fields,
    channel_name_problem,
    command_queue,
    command_stream,
    events_exchange,
    events_stream,
    parse_command,
    rejection,
    routing_key,
    row_message_id,
    text_field,
)


class _Limits(TypedDict):
    max_bytes: int
    max_depth: int


LIMITS: _Limits = {"max_bytes": 1000, "max_depth": 4}


def test_a_submit_command_is_its_envelope_and_body() -> None:
    body = json.dumps({"correlation_id": "o-1", "input": {"a": 1}}).encode()
    command = parse_command("m-1", SUBMIT_TASK, body, idempotency_key="k-1", **LIMITS)
    assert (command.type, command.message_id, command.idempotency_key) == (SUBMIT_TASK, "m-1", "k-1")
    assert command.body == {"correlation_id": "o-1", "input": {"a": 1}}


@pytest.mark.parametrize(
    ("message_id", "kind", "body", "status"),
    [
        (None, SUBMIT_TASK, b"{}", 400),  # no MessageId: nothing to deduplicate on
        ("has space", SUBMIT_TASK, b"{}", 400),
        ("x" * 201, SUBMIT_TASK, b"{}", 400),
        ("m", None, b"{}", 400),
        ("m", "DeleteEverything", b"{}", 400),
        ("m", SUBMIT_TASK, b"{not json", 400),
        ("m", SUBMIT_TASK, b"[1]", 422),
        ("m", SUBMIT_TASK, b'{"input": "' + b"x" * 1000 + b'"}', 413),
        ("m", SUBMIT_TASK, b'{"input": [[[[[1]]]]]}', 422),  # the body object plus 4 levels
    ],
)
def test_a_command_that_cannot_be_taken_is_refused_with_the_status_http_would_give(
    message_id: str | None, kind: str | None, body: bytes, status: int
) -> None:
    with pytest.raises(CommandRefused) as refused:
        parse_command(message_id, kind, body, **LIMITS)
    assert refused.value.status == status


def test_the_depth_limit_is_the_inputs_plus_the_body_object() -> None:
    assert parse_command("m", SUBMIT_TASK, b'{"input": [[[1]]]}', **LIMITS).body == {"input": [[[1]]]}
    with pytest.raises(CommandRefused) as refused:
        parse_command("m", SUBMIT_TASK, b'{"input": [[[[[1]]]]]}', **LIMITS)
    assert refused.value.errors[0]["field"] == "input"


def test_a_cancel_needs_a_correlation_id_and_a_short_reason() -> None:
    assert cancel_fields({"correlation_id": "o-1"}) == ("o-1", "canceled by the domain app")
    assert cancel_fields({"correlation_id": "o-1", "reason": "r"}) == ("o-1", "r")
    for bad in ({}, {"correlation_id": "a b"}, {"correlation_id": "o", "reason": ""}, {"correlation_id": "o", "x": 1}):
        with pytest.raises(CommandRefused) as refused:
            cancel_fields(bad)
        assert refused.value.status == 422


def test_names_routing_keys_and_streams() -> None:
    assert command_queue("liaison", "shop") == "liaison.shop.commands"
    assert events_exchange("liaison") == "liaison.events"
    assert routing_key("shop", "task.completed") == "shop.task.completed"
    assert command_stream("liaison", "shop") == "liaison:shop:commands"
    assert events_stream("liaison", "shop") == "liaison:shop:events"
    assert row_message_id("msg_1") == "msg_1.channel"


@given(st.from_regex(CHANNEL_NAME, fullmatch=True), st.sampled_from(["task.accepted", "task.completed"]))
def test_a_routing_key_starts_with_exactly_one_word_the_client(client: str, event_type: str) -> None:
    """A binding ``<client>.#`` gets the client's events and no other client's: the name is one
    topic word (no dot), so ``shop`` never matches ``shop.x``'s keys."""
    words = routing_key(client, event_type).split(".")
    assert words[0] == client and ".".join(words[1:]) == event_type


def test_only_names_that_are_one_topic_word_may_use_a_channel() -> None:
    assert channel_name_problem("shop-1_eu") is None
    for bad in ("Shop", "shop.eu", "shop:eu", "shop eu", "", "x" * 65):
        assert channel_name_problem(bad) is not None
    client = Client(name="shop.eu", callback_secrets=[])
    with pytest.raises(CredentialError):
        set_channel(client, "amqp")
    with pytest.raises(CredentialError):
        set_channel(Client(name="shop", callback_secrets=[]), "kafka")
    ok = Client(name="shop", callback_secrets=[])
    set_channel(ok, "redis")
    assert ok.channel == "redis"
    set_channel(ok, None)
    assert ok.channel is None


def test_fields_read_as_text_from_bytes_or_str() -> None:
    assert text_field({b"type": b"SubmitTask"}, "type") == "SubmitTask"
    assert text_field({"type": "CancelTask"}, "type") == "CancelTask"
    assert text_field({b"type": b"\xff"}, "type") is None
    assert text_field({}, "type") is None


def test_a_rejection_names_the_command_and_the_problem() -> None:
    body = rejection("m-1", CANCEL_TASK, 404, "no such task", [], correlation_id="o-1", occurred_at="t")
    assert body["type"] == "task.rejected" and body["command_message_id"] == "m-1" and body["status"] == 404


def test_a_channel_client_needs_no_callback_url_an_http_one_does() -> None:
    providers = {"sim": ProviderSettings(name="sim", kind="rest", base_url="http://127.0.0.1:1", webhook_secrets=())}
    body = {"input": {"a": 1}}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    req = parse_submit(body, providers=providers, default_provider="sim", client_callback_url=None, now=now,
                       client_channel="amqp")  # fmt: skip
    assert req.callback_url is None
    with pytest.raises(ValidationFailed):
        parse_submit(body, providers=providers, default_provider="sim", client_callback_url=None, now=now)


def test_a_channel_row_waits_for_its_earlier_ones_as_long_as_they_may_take() -> None:
    from datetime import timedelta

    from workers.tasks.channel import HELD_RECHECK_S, held_for

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert held_for([None], now) == HELD_RECHECK_S  # queued or in flight: look again in a moment
    assert held_for([now + timedelta(seconds=30), None], now) == HELD_RECHECK_S
    assert held_for([now + timedelta(seconds=30), now + timedelta(seconds=5)], now) == 30 + HELD_RECHECK_S
    assert held_for([now - timedelta(seconds=5)], now) == HELD_RECHECK_S  # due already
