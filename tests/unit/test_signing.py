"""Standard Webhooks signing (webhooks.signing): roundtrip, rotation, replay window, and totality.

"Total" means: whatever the headers and body, verify() returns the message id or raises
SignatureError — never binascii.Error, ValueError, OverflowError, ... (a view maps it to 401).
"""

from __future__ import annotations

import base64
import contextlib
from typing import cast

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from webhooks.signing import (
    DEFAULT_TOLERANCE_S,
    SECRET_PREFIX,
    SignatureError,
    SignedHeaders,
    StaleTimestamp,
    decode_secret,
    generate_secret,
    sign,
    verify,
)

# Fixed secrets (deterministic; no randomness needed): 32 bytes each.
SECRET_A = SECRET_PREFIX + base64.b64encode(bytes(range(32))).decode()
SECRET_B = SECRET_PREFIX + base64.b64encode(bytes(range(100, 132))).decode()
SECRET_C = SECRET_PREFIX + base64.b64encode(b"\xff" * 24).decode()

NOW = 1_700_000_000.5  # a float, like time.time()
TS = 1_700_000_000
MSG_ID = "msg_2b4f1c"
BODY = b'{"type":"job.accepted","job_id":"j-1"}'


def signed(secrets=SECRET_A, msg_id=MSG_ID, ts=TS, body=BODY) -> dict[str, str]:
    return sign(secrets, msg_id, ts, body).as_dict()


def reason_of(headers, *, secrets=(SECRET_A,), body=BODY, now=NOW) -> str:
    with pytest.raises(SignatureError) as info:
        verify(secrets, headers, body, now)
    return info.value.reason


# --- roundtrip & rotation -------------------------------------------------------------------


def test_sign_produces_standard_headers():
    """One `v1,<base64 sha256>` per secret, the timestamp as decimal seconds, the id as given."""
    headers = sign(SECRET_A, MSG_ID, TS, BODY)
    assert isinstance(headers, SignedHeaders)
    assert headers.webhook_id == MSG_ID
    assert headers.webhook_timestamp == str(TS)
    version, _, b64 = headers.webhook_signature.partition(",")
    assert version == "v1"
    assert len(base64.b64decode(b64, validate=True)) == 32
    assert set(headers.as_dict()) == {"webhook-id", "webhook-timestamp", "webhook-signature"}


def test_sign_truncates_float_timestamp():
    assert sign(SECRET_A, MSG_ID, cast(int, TS + 0.9), BODY).webhook_timestamp == str(TS)  # a float on purpose


def test_sign_is_deterministic():
    assert signed() == signed()


def test_roundtrip_returns_message_id():
    assert verify([SECRET_A], signed(), BODY, NOW) == MSG_ID


@given(
    msg_id=st.text(min_size=1, max_size=100).filter(lambda s: s.strip() == s and s),
    body=st.binary(max_size=2000),
    skew=st.integers(-DEFAULT_TOLERANCE_S, DEFAULT_TOLERANCE_S),
)
def test_roundtrip_property(msg_id, body, skew):
    """Any id (any Unicode), any body, any skew inside the tolerance: what we sign, we verify."""
    headers = sign(SECRET_A, msg_id, TS, body).as_dict()
    assert verify([SECRET_A], headers, body, TS + skew) == msg_id


def test_rotation_signature_for_two_secrets_verifies_with_either():
    """While a secret rotates the sender signs with both; a receiver holding either one accepts."""
    headers = signed([SECRET_A, SECRET_B])
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert verify([SECRET_A], headers, BODY, NOW) == MSG_ID
    assert verify([SECRET_B], headers, BODY, NOW) == MSG_ID
    assert reason_of(headers, secrets=[SECRET_C]) == "bad_signature"


def test_rotation_receiver_with_two_secrets_only_second_matches():
    """A receiver configured with [old, new] accepts a message signed only with `new`."""
    assert verify([SECRET_C, SECRET_B], signed(SECRET_B), BODY, NOW) == MSG_ID


def test_broken_configured_secret_is_skipped_not_fatal():
    """A malformed secret in the receiver's list never matches but does not break the others."""
    assert verify(["not-a-secret", "whsec_!!!", SECRET_A], signed(), BODY, NOW) == MSG_ID
    assert reason_of(signed(), secrets=["not-a-secret"]) == "bad_signature"


def test_no_secrets_configured_is_bad_signature():
    assert reason_of(signed(), secrets=[]) == "bad_signature"


def test_unknown_scheme_beside_valid_v1_is_ok():
    """Other schemes (v1a, ...) may sit beside ours, in any order; they neither help nor hurt."""
    good = signed()["webhook-signature"]
    for sig in (f"v1a,Zm9vYmFy {good}", f"{good} v1a,Zm9vYmFy", f"v2,abc {good} v1a,xyz"):
        headers = signed() | {"webhook-signature": sig}
        assert verify([SECRET_A], headers, BODY, NOW) == MSG_ID


def test_only_unknown_schemes_is_malformed():
    headers = signed() | {"webhook-signature": "v1a,Zm9vYmFy v2,Zm9v"}
    assert reason_of(headers) == "malformed_header"


def test_invalid_v1_entry_beside_valid_one_is_ok():
    """A garbage v1 entry is skipped; a valid one next to it still proves the message."""
    headers = signed() | {"webhook-signature": "v1,%%%notbase64 " + signed()["webhook-signature"]}
    assert verify([SECRET_A], headers, BODY, NOW) == MSG_ID


# --- replay window --------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [DEFAULT_TOLERANCE_S + 1, -(DEFAULT_TOLERANCE_S + 1), 10**6, -(10**6)])
def test_timestamp_outside_tolerance_is_stale(offset):
    """Too old is a replay, too new is a clock or forgery problem: both are StaleTimestamp("stale")."""
    with pytest.raises(StaleTimestamp) as info:
        verify([SECRET_A], signed(ts=TS), BODY, TS + offset)
    assert info.value.reason == "stale"
    assert isinstance(info.value, SignatureError)


@pytest.mark.parametrize("offset", [DEFAULT_TOLERANCE_S, -DEFAULT_TOLERANCE_S, 0])
def test_timestamp_exactly_at_tolerance_is_accepted(offset):
    assert verify([SECRET_A], signed(ts=TS), BODY, TS + offset) == MSG_ID


def test_custom_tolerance():
    assert verify([SECRET_A], signed(), BODY, TS + 10, tolerance_s=10) == MSG_ID
    with pytest.raises(StaleTimestamp):
        verify([SECRET_A], signed(), BODY, TS + 11, tolerance_s=10)


def test_stale_is_checked_before_signature():
    """A stale message is refused as stale even when its signature is also wrong."""
    with pytest.raises(StaleTimestamp):
        verify([SECRET_B], signed(SECRET_A), BODY, TS + 1000)


# --- wrong secret / tampering ---------------------------------------------------------------


def test_wrong_secret_is_bad_signature():
    with pytest.raises(SignatureError) as info:
        verify([SECRET_B], signed(SECRET_A), BODY, NOW)
    assert info.value.reason == "bad_signature"
    assert not isinstance(info.value, StaleTimestamp)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda h, b: (h, b + b" "), id="body-appended"),
        pytest.param(lambda h, b: (h, b.replace(b"j-1", b"j-2")), id="body-changed"),
        pytest.param(lambda h, b: (h, b""), id="body-empty"),
        pytest.param(lambda h, b: (h | {"webhook-id": "msg_other"}, b), id="id"),
        pytest.param(lambda h, b: (h | {"webhook-timestamp": str(TS + 1)}, b), id="timestamp"),
    ],
)
def test_tampering_is_bad_signature(tamper):
    """The signature covers id, timestamp and body: change any one and it no longer verifies."""
    headers, body = tamper(signed(), BODY)
    assert reason_of(headers, body=body) == "bad_signature"


def test_flipped_signature_bit_is_bad_signature():
    sig = bytearray(base64.b64decode(signed()["webhook-signature"][3:]))
    sig[0] ^= 1
    headers = signed() | {"webhook-signature": "v1," + base64.b64encode(bytes(sig)).decode()}
    assert reason_of(headers) == "bad_signature"


# --- header names ---------------------------------------------------------------------------


@pytest.mark.parametrize("style", [str.title, str.upper, str.lower, lambda s: s.swapcase()])
def test_header_names_are_case_insensitive(style):
    """A plain dict with `Webhook-Id`, `WEBHOOK-ID`, ... works like the canonical lower-case names."""
    headers = {style(name): value for name, value in signed().items()}
    assert verify([SECRET_A], headers, BODY, NOW) == MSG_ID


def test_surrounding_whitespace_in_values_is_tolerated():
    headers = {name: f"  {value} " for name, value in signed().items()}
    assert verify([SECRET_A], headers, BODY, NOW) == MSG_ID


# --- malformed headers: always SignatureError -----------------------------------------------


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header(missing):
    headers = {k: v for k, v in signed().items() if k != missing}
    assert reason_of(headers) == "missing_header"


def test_no_headers_at_all():
    assert reason_of({}) == "missing_header"


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
@pytest.mark.parametrize("value", ["", " ", "   \t  ", None])
def test_empty_or_blank_header(name, value):
    assert reason_of(signed() | {name: value}) == "missing_header"


@pytest.mark.parametrize(
    "timestamp",
    [
        "abc",
        "-5",
        str(-TS),
        "1700000000.0",
        "1.7e9",
        "0x6553F100",
        "+1700000000",
        "1700000000 1",
        # Look-alike digits are the point of these two (ruff's RUF001 warns of exactly them):
        "１７００００００００",  # noqa: RUF001 -- full-width digits: isdigit() is True but not ASCII
        "١٧٠٠٠٠٠٠٠٠",  # noqa: RUF001 -- Arabic-Indic digits
        "²",
        "1_700_000_000",
    ],
)
def test_bad_timestamp_is_malformed(timestamp):
    assert reason_of(signed() | {"webhook-timestamp": timestamp}) == "malformed_header"


@pytest.mark.parametrize("timestamp", ["0", "9" * 12])
def test_far_timestamp_is_stale(timestamp):
    """Numeric but far from now is stale; longer than 12 digits is no unix time at all (malformed)."""
    with pytest.raises(StaleTimestamp):
        verify([SECRET_A], signed() | {"webhook-timestamp": timestamp}, BODY, NOW)


@pytest.mark.parametrize("digits", [309, 400, 4096])
def test_huge_timestamp_is_signature_error(digits):
    """Documents the correct behaviour: any all-digit timestamp, however long, is a SignatureError."""
    with pytest.raises(SignatureError):
        verify([SECRET_A], signed() | {"webhook-timestamp": "9" * digits}, BODY, NOW)


@pytest.mark.parametrize(
    "signature",
    [
        "v1",  # no comma
        "v1" + "A" * 44,  # no comma
        "v1,",  # empty
        "v1,!!!!",  # invalid base64 characters
        "v1,abc",  # bad padding
        "v1,Zm9v=Zm9v",  # padding in the middle
        "v1,é" + "A" * 43,  # non-ASCII
        "v1,ÀÁÂÃ",
        "v1 , abc",
        ",",
        " ",
        "      ",
        "v1;abc",
        "V1,Zm9vYmFy",  # versions are case-sensitive
        "x" * 4096,
    ],
)
def test_malformed_signature_header(signature):
    """Garbage signature lists are refused as SignatureError (`v1,` with nothing decodes to b"" and
    is merely a signature that does not match), never as another exception and never as stale."""
    assert reason_of(signed() | {"webhook-signature": signature}) in {
        "malformed_header",
        "missing_header",
        "bad_signature",
    }


@pytest.mark.parametrize("signature", ["v1,AAAA", "v1," + "A" * 44, "v1,Zm9vYmFy"])
def test_wellformed_but_wrong_signature(signature):
    """Valid base64 of the wrong digest (or of the wrong length) is simply a bad signature."""
    assert reason_of(signed() | {"webhook-signature": signature}) == "bad_signature"


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_10kb_header_is_malformed(name):
    """An oversized header is refused before any parsing."""
    assert reason_of(signed() | {name: "v1," + "A" * 10_240}) == "malformed_header"


def test_non_ascii_message_id_verifies():
    """A non-ASCII id is fine as long as both sides sign the same UTF-8 bytes."""
    headers = signed(msg_id="msg_ünïcødé_✓")
    assert verify([SECRET_A], headers, BODY, NOW) == "msg_ünïcødé_✓"


def test_surrogate_in_message_id_is_signature_error():
    with pytest.raises(SignatureError):
        verify([SECRET_A], signed() | {"webhook-id": "\ud800"}, BODY, NOW)


header_text = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.from_regex(r"\A[0-9]{1,20}\Z"),
    st.from_regex(r"\A(v1a?,[A-Za-z0-9+/=]{0,48} ?){1,3}\Z"),
)


@given(
    msg_id=header_text,
    timestamp=st.one_of(header_text, st.integers(TS - 400, TS + 400).map(str)),
    signature=header_text,
    body=st.binary(max_size=200),
)
@example(msg_id=MSG_ID, timestamp=str(TS), signature="v1,", body=BODY)
@example(msg_id=MSG_ID, timestamp=str(TS), signature="v1,\x00", body=b"")
def test_verify_is_total(msg_id, timestamp, signature, body):
    """Arbitrary header text and body: verify returns a str or raises SignatureError, nothing else.

    (Very long all-digit timestamps are pinned separately by test_huge_timestamp_is_signature_error.)
    """
    headers = {"webhook-id": msg_id, "webhook-timestamp": timestamp, "webhook-signature": signature}
    try:
        result = verify([SECRET_A, SECRET_B], headers, body, TS)
    except SignatureError as exc:
        assert exc.reason in {"missing_header", "malformed_header", "stale", "bad_signature"}
    else:
        assert result == msg_id.strip()


@given(
    headers=st.dictionaries(st.text(max_size=30), st.text(max_size=60), max_size=6),
    body=st.binary(max_size=100),
)
def test_verify_is_total_for_arbitrary_header_dicts(headers, body):
    """Any str→str mapping of headers: SignatureError or success, never another exception."""
    with contextlib.suppress(SignatureError):
        verify([SECRET_A], headers, body, NOW)


# --- secrets --------------------------------------------------------------------------------


def test_generate_secret_round_trips():
    """A generated secret has the whsec_ prefix and decodes to 32 random bytes by default."""
    secret = generate_secret()
    assert secret.startswith(SECRET_PREFIX)
    assert len(decode_secret(secret)) == 32
    assert generate_secret() != secret
    assert len(decode_secret(generate_secret(64))) == 64
    assert verify([secret], sign(secret, MSG_ID, TS, BODY).as_dict(), BODY, NOW) == MSG_ID


def test_decode_secret_returns_key_bytes():
    assert decode_secret(SECRET_A) == bytes(range(32))
    assert decode_secret(SECRET_PREFIX + base64.b64encode(b"k" * 16).decode()) == b"k" * 16


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param(base64.b64encode(b"k" * 32).decode(), id="no-prefix"),
        pytest.param("WHSEC_" + base64.b64encode(b"k" * 32).decode(), id="prefix-wrong-case"),
        pytest.param("whsec", id="prefix-only-partial"),
        pytest.param("whsec_", id="empty-key"),
        pytest.param("whsec_!!!!notbase64", id="bad-base64"),
        pytest.param("whsec_" + base64.b64encode(b"k" * 32).decode()[:-1], id="bad-padding"),
        pytest.param("whsec_é" + base64.b64encode(b"k" * 32).decode(), id="non-ascii"),
        pytest.param("whsec_" + base64.b64encode(b"k" * 15).decode(), id="15-bytes-too-short"),
        pytest.param("", id="empty"),
        pytest.param(None, id="none"),
        pytest.param(b"whsec_AAAA", id="bytes"),
    ],
)
def test_decode_secret_rejects_malformed(secret):
    with pytest.raises(ValueError):
        decode_secret(secret)


def test_sign_rejects_bad_secret_and_no_secret():
    """Signing is configuration-side: a malformed secret or an empty list is a ValueError."""
    with pytest.raises(ValueError):
        sign("not-a-secret", MSG_ID, TS, BODY)
    with pytest.raises(ValueError):
        sign([], MSG_ID, TS, BODY)
