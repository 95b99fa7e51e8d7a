"""Interop of webhooks.signing with the scheme's reference library, ``standardwebhooks``.

Vendors sign with the library (or with Svix, which sends the same scheme under ``svix-*`` names);
domain apps verify our callbacks with it. Both directions are checked with the library itself.
"""

from __future__ import annotations

import base64
import contextlib
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook
from werkzeug.datastructures import Headers

from webhooks.signing import HEADER_SETS, SECRET_PREFIX, SignatureError, StaleTimestamp, header_set, sign, verify

SECRET = SECRET_PREFIX + base64.b64encode(bytes(range(32))).decode()
OTHER = SECRET_PREFIX + base64.b64encode(bytes(range(50, 82))).decode()
TS = 1_700_000_000
NOW = TS + 0.5
BODY = b'{"type":"job.accepted","job_id":"j-1"}'
WEBHOOK, SVIX = HEADER_SETS


def library_headers(
    names: tuple[str, str, str], msg_id: str = "msg_lib", secret: str = SECRET, ts: int = TS, body: bytes = BODY
) -> dict[str, str]:
    """Headers as a sender using the ``standardwebhooks`` library makes them, under ``names``."""
    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, UTC), body.decode())
    id_name, ts_name, sig_name = names
    return {id_name: msg_id, ts_name: str(ts), sig_name: signature}


@pytest.mark.parametrize("names", [WEBHOOK, SVIX], ids=["webhook", "svix"])
def test_a_library_signature_verifies_under_either_set_of_names(names: tuple[str, str, str]) -> None:
    assert verify([OTHER, SECRET], library_headers(names), BODY, NOW) == "msg_lib"


@pytest.mark.parametrize("names", [WEBHOOK, SVIX], ids=["webhook", "svix"])
def test_either_set_of_names_gets_the_same_checks(names: tuple[str, str, str]) -> None:
    with pytest.raises(SignatureError) as wrong:
        verify([OTHER], library_headers(names), BODY, NOW)
    assert wrong.value.reason == "bad_signature"
    with pytest.raises(StaleTimestamp):
        verify([SECRET], library_headers(names, ts=TS - 301), BODY, NOW)
    with pytest.raises(SignatureError) as tampered:
        verify([SECRET], library_headers(names), BODY + b" ", NOW)
    assert tampered.value.reason == "bad_signature"


@pytest.mark.parametrize("names", [WEBHOOK, SVIX], ids=["webhook", "svix"])
def test_werkzeug_headers_are_read_too(names: tuple[str, str, str]) -> None:
    """What the inbound view passes: werkzeug's Headers, which iterate as (name, value) pairs."""
    headers = Headers([*list(library_headers(names).items()), ("Content-Type", "application/json")])
    assert verify([SECRET], headers, BODY, NOW) == "msg_lib"


def test_svix_names_are_read_case_insensitively() -> None:
    headers = {k.title(): v for k, v in library_headers(SVIX).items()}  # Svix-Id, Svix-Timestamp, ...
    assert verify([SECRET], headers, BODY, NOW) == "msg_lib"


def test_when_both_sets_are_present_webhook_names_win() -> None:
    good_webhook = library_headers(WEBHOOK, msg_id="msg_webhook")
    good_svix = library_headers(SVIX, msg_id="msg_svix")
    bad_svix = {**good_svix, "svix-signature": "v1,AAAA"}
    bad_webhook = {**good_webhook, "webhook-signature": "v1,AAAA"}
    # A valid webhook-* set is read (its id is the message id) whatever the svix-* set holds ...
    assert verify([SECRET], {**good_webhook, **bad_svix}, BODY, NOW) == "msg_webhook"
    assert verify([SECRET], {**good_webhook, **good_svix}, BODY, NOW) == "msg_webhook"
    # ... and a bad webhook-* set is not rescued by a valid svix-* one.
    with pytest.raises(SignatureError) as exc:
        verify([SECRET], {**bad_webhook, **good_svix}, BODY, NOW)
    assert exc.value.reason == "bad_signature"


def test_the_two_sets_are_never_mixed() -> None:
    svix = library_headers(SVIX)
    half = {
        "webhook-id": svix["svix-id"],
        "svix-timestamp": svix["svix-timestamp"],
        "svix-signature": svix["svix-signature"],
    }
    assert header_set(half) == WEBHOOK
    with pytest.raises(SignatureError) as exc:
        verify([SECRET], half, BODY, NOW)
    assert exc.value.reason == "missing_header"


def test_no_headers_at_all_is_missing_header() -> None:
    with pytest.raises(SignatureError) as exc:
        verify([SECRET], {"content-type": "application/json"}, BODY, NOW)
    assert exc.value.reason == "missing_header"


@given(values=st.lists(st.text(max_size=60), min_size=3, max_size=3), body=st.binary(max_size=64))
def test_svix_names_keep_the_verifier_total(values: list[str], body: bytes) -> None:
    """Whatever the svix-* headers hold, the answer is a message id or a SignatureError."""
    headers = dict(zip(SVIX, values, strict=True))
    with contextlib.suppress(SignatureError):
        verify([SECRET], headers, body, NOW)


def test_our_signature_verifies_with_the_library() -> None:
    """What the relay sends a domain app (several secrets while one rotates) passes the library's
    own verifier, with either secret."""
    body = b'{"correlation_id":"order-1","type":"task.completed"}'
    headers = sign([OTHER, SECRET], "msg_relay", int(time.time()), body).as_dict()
    for secret in (SECRET, OTHER):
        assert Webhook(secret).verify(body, headers) == {"correlation_id": "order-1", "type": "task.completed"}
