"""The messages of the amqp provider (wire.broker_messages): shapes, header mapping, replies."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhooks.signing import generate_secret, sign, verify
from wire.bounded_json import JsonLimits
from wire.broker_messages import (
    CANCEL,
    IDEMPOTENCY_KEY,
    MAX_HEADER_CHARS,
    MAX_HEADERS,
    STATUS,
    SUBMIT,
    MalformedCommand,
    MalformedReply,
    cancel_command,
    header_items,
    parse_command,
    parse_status_reply,
    status_command,
    status_reply,
    submit_command,
)


def test_a_submit_carries_the_reference_as_idempotency_key_and_correlation_id():
    command = submit_command("ref-1", {"sku": "A1"}, "m1")
    assert command.type == SUBMIT == "job.submit"
    assert json.loads(command.body) == {"reference": "ref-1", "input": {"sku": "A1"}}
    assert command.headers == {IDEMPOTENCY_KEY: "ref-1"}
    assert (command.message_id, command.correlation_id) == ("m1", "ref-1")
    assert b" " not in command.body  # compact: the bytes sent are the bytes a vendor may sign over


def test_cancel_and_status_name_the_job():
    cancel = cancel_command("job-7", "m2")
    assert (cancel.type, json.loads(cancel.body), cancel.headers) == (
        CANCEL,
        {"job_id": "job-7"},
        {IDEMPOTENCY_KEY: "job-7"},
    )
    status = status_command("job-7", "m3", "corr-9")
    assert (status.type, json.loads(status.body), status.correlation_id) == (STATUS, {"job_id": "job-7"}, "corr-9")
    assert status.headers == {}


def test_header_items_reads_typed_amqp_headers_as_the_verifier_wants_them():
    headers = {
        "Webhook-Id": b"msg_1",
        "webhook-timestamp": 1700000000,
        "webhook-signature": "v1,abc",
        "x-death": [{"count": 1}],  # a table: no signature header is one
        "flag": True,
        "bad": b"\xff\xfe",
        "long": "x" * (MAX_HEADER_CHARS + 1),
    }
    assert header_items(headers) == {
        "webhook-id": "msg_1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": "v1,abc",
    }
    assert header_items(None) == {}
    many = {f"h{i}": "v" for i in range(MAX_HEADERS + 10)}
    assert len(header_items(many)) == MAX_HEADERS


def test_a_message_signed_by_the_vendor_verifies_through_the_header_mapping():
    secret, body = generate_secret(), b'{"type":"job.accepted","job_id":"r1"}'
    signed = sign(secret, "msg_9", int(time.time()), body).as_dict()
    as_received = {k: v.encode() for k, v in signed.items()}  # a client that sends bytes
    assert verify([secret], header_items(as_received), body, time.time()) == "msg_9"


def test_status_replies_round_trip_and_unknown_jobs_are_not_found():
    limits = JsonLimits()
    reply = parse_status_reply(status_reply("r1", "succeeded", {"x": 1}), limits)
    assert (reply.job_id, reply.status, reply.outcome, reply.found) == ("r1", "succeeded", {"x": 1}, True)
    missing = parse_status_reply(status_reply("r2", None), limits)
    assert (missing.job_id, missing.found) == ("r2", False)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[]", "object"),
        (b"{", "JSON"),
        (b'{"job_id":"r1","status":"exploded"}', "status"),
        (b'{"status":"running"}', "job_id"),
        (b'{"job_id":"r1","status":"succeeded","outcome":[1]}', "outcome"),
        (b'{"job_id":"r1","status":"succeeded","outcome":{"a":' + b"[" * 40 + b"]" * 40 + b"}}", "deep"),
        (b'{"job_id":"r1","status":"succeeded","outcome":{"a":"' + b"x" * 200 + b'"}}', "bytes"),
    ],
)
def test_a_status_reply_that_breaks_the_contract_is_refused(body: bytes, why: str):
    with pytest.raises(MalformedReply, match=why):
        parse_status_reply(body, JsonLimits(max_depth=32, max_bytes=100))


def test_commands_as_a_vendor_reads_them():
    assert parse_command(SUBMIT, submit_command("r1", None, "m").body) == {"reference": "r1", "input": None}
    assert parse_command(CANCEL, cancel_command("r1", "m").body) == {"job_id": "r1"}
    for kind, body in [("job.explode", b"{}"), (SUBMIT, b'{"reference":"r1"}'), (CANCEL, b"{}"), (STATUS, b"[")]:
        with pytest.raises(MalformedCommand):
            parse_command(kind, body)


@given(st.dictionaries(st.text(max_size=20), st.one_of(st.text(max_size=50), st.binary(max_size=50), st.integers())))
def test_header_items_never_raises_and_gives_text(headers):
    out = header_items(headers)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in out.items())
