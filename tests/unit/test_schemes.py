"""Inbound verification schemes (webhooks.schemes): each scheme accepts what its sender makes, and
refuses forged, wrong-secret, stale and malformed requests with a SignatureError (never another
exception); the signers are code nobody here wrote wherever one exists: Stripe's own library
(``stripe.WebhookSignature``), GitHub's published test vector, ``standardwebhooks``."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
import stripe
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from webhooks.schemes import (
    BASIC,
    CONFIRM,
    GITHUB,
    HMAC,
    SCHEMES,
    STANDARD,
    STRIPE,
    TOKEN_URL,
    EventIdSource,
    HmacParams,
    Profile,
    Verified,
    check_secret,
    token_digest,
    verify,
)
from webhooks.signing import SECRET_PREFIX, SignatureError, StaleTimestamp

TS = 1_700_000_000
NOW = TS + 0.5
BODY = b'{"id":"evt_1","type":"job.accepted","job_id":"j-1"}'
WHSEC = SECRET_PREFIX + base64.b64encode(bytes(range(32))).decode()
STRIPE_SECRET = "whsec_test_secret_not_base64!"  # Stripe's secrets are used as their literal text
OTHER = "another-secret"


def reason(profile: Profile, headers: dict[str, str], body: bytes = BODY, now: float = NOW, token=None) -> str:
    with pytest.raises(SignatureError) as info:
        verify(profile, headers, body, now, token)
    return info.value.reason


# --- Stripe, signed by Stripe's own library ------------------------------------------------------


def stripe_header(secret: str = STRIPE_SECRET, ts: int = TS, body: bytes = BODY) -> str:
    return stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=ts)


STRIPE_PROFILE = Profile(STRIPE, (STRIPE_SECRET,))


def test_stripe_header_from_stripes_library_verifies_and_the_event_id_is_the_body_id() -> None:
    assert verify(STRIPE_PROFILE, {"Stripe-Signature": stripe_header()}, BODY, NOW) == Verified("evt_1")


def test_stripe_rotation_two_secrets_and_two_v1_signatures() -> None:
    old, new = stripe_header(secret=OTHER), stripe_header()
    both = old + "," + new.split(",", 1)[1]  # t=…,v1=<old>,v1=<new>: what Stripe sends while rolling
    assert verify(Profile(STRIPE, (OTHER,)), {"Stripe-Signature": both}, BODY, NOW).event_id == "evt_1"
    assert verify(STRIPE_PROFILE, {"Stripe-Signature": both}, BODY, NOW).event_id == "evt_1"
    assert verify(Profile(STRIPE, ("x" * 20, STRIPE_SECRET)), {"Stripe-Signature": new}, BODY, NOW)


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"Stripe-Signature": stripe_header(secret=OTHER)}, BODY, "bad_signature"),
        ({"Stripe-Signature": stripe_header()}, BODY + b" ", "bad_signature"),
        ({"Stripe-Signature": stripe_header(ts=TS - 301)}, BODY, "stale"),
        ({"Stripe-Signature": stripe_header(ts=TS + 301)}, BODY, "stale"),
        ({}, BODY, "missing_header"),
        ({"Stripe-Signature": "v1=abc"}, BODY, "malformed_header"),
        ({"Stripe-Signature": f"t={TS},v0=" + "00" * 32}, BODY, "malformed_header"),
        ({"Stripe-Signature": f"t={TS},t={TS},v1=" + "00" * 32}, BODY, "malformed_header"),
        ({"Stripe-Signature": "t=soon,v1=" + "00" * 32}, BODY, "malformed_header"),
        ({"Stripe-Signature": f"t={TS},v1=zz"}, BODY, "malformed_header"),
    ],
    ids=["wrong-secret", "tampered", "stale", "future", "missing", "no-t", "v0-only", "two-t", "bad-t", "bad-hex"],
)
def test_stripe_refusals(headers: dict[str, str], body: bytes, expected: str) -> None:
    assert reason(STRIPE_PROFILE, headers, body) == expected


def test_stripe_agrees_with_stripes_own_verifier() -> None:
    """The same inputs, checked by both: accepted by one exactly when accepted by the other."""
    cases = [
        (stripe_header(), BODY),
        (stripe_header(secret=OTHER), BODY),
        (stripe_header(), BODY + b"x"),
        (stripe_header() + ",v1=" + "ab" * 32, BODY),
        ("t=1,v1=" + "ab" * 32, BODY),
    ]
    for header_value, body in cases:
        try:
            stripe.WebhookSignature.verify_header(body, header_value, STRIPE_SECRET, tolerance=None)
            theirs = True
        except stripe.SignatureVerificationError:
            theirs = False
        try:
            verify(Profile(STRIPE, (STRIPE_SECRET,), tolerance_s=10**10), {"Stripe-Signature": header_value}, body, NOW)
            ours = True
        except SignatureError:
            ours = False
        assert ours == theirs, header_value


def test_stripe_event_without_an_id_is_refused() -> None:
    body = b'{"type":"job.accepted"}'
    headers = {"Stripe-Signature": stripe_header(body=body)}
    assert reason(STRIPE_PROFILE, headers, body) == "missing_event_id"


# --- GitHub, its published test vector -----------------------------------------------------------

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
GITHUB_PROFILE = Profile(GITHUB, (GITHUB_SECRET,))


def github_headers(signature: str = GITHUB_SIGNATURE, delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958"):
    return {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": delivery}


def test_github_published_vector_verifies_and_the_event_id_is_the_delivery() -> None:
    verified = verify(GITHUB_PROFILE, github_headers(), GITHUB_PAYLOAD, NOW)
    assert verified == Verified("72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert verify(Profile(GITHUB, ("old secret", GITHUB_SECRET)), github_headers(), GITHUB_PAYLOAD, NOW)


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        (github_headers(), b"Hello, World?", "bad_signature"),
        (github_headers("sha256=" + "0" * 64), GITHUB_PAYLOAD, "bad_signature"),
        (github_headers("sha1=" + "0" * 40), GITHUB_PAYLOAD, "malformed_header"),
        (github_headers("sha256=" + "0" * 63), GITHUB_PAYLOAD, "malformed_header"),
        (github_headers(GITHUB_SIGNATURE[7:]), GITHUB_PAYLOAD, "malformed_header"),
        ({"X-GitHub-Delivery": "d"}, GITHUB_PAYLOAD, "missing_header"),
        ({"X-Hub-Signature-256": GITHUB_SIGNATURE}, GITHUB_PAYLOAD, "missing_event_id"),
    ],
    ids=["tampered", "forged", "sha1", "short", "no-prefix", "missing", "no-delivery"],
)
def test_github_refusals(headers: dict[str, str], body: bytes, expected: str) -> None:
    assert reason(GITHUB_PROFILE, headers, body) == expected


def test_github_wrong_secret() -> None:
    assert reason(Profile(GITHUB, ("It's a secret to everybody",)), github_headers(), GITHUB_PAYLOAD) == "bad_signature"


# --- Standard Webhooks, signed by its reference library -----------------------------------------


def test_standard_webhooks_from_the_library_verifies_with_its_own_id() -> None:
    signature = Webhook(WHSEC).sign("msg_1", datetime.fromtimestamp(TS, UTC), BODY.decode())
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(TS), "webhook-signature": signature}
    assert verify(Profile(STANDARD, (WHSEC,)), headers, BODY, NOW) == Verified("msg_1")
    assert verify(Profile(STANDARD, (WHSEC,), event_id=EventIdSource("digest")), headers, BODY, NOW).event_id == (
        "sha256:" + hashlib.sha256(BODY).hexdigest()
    )
    stale = {**headers, "webhook-timestamp": str(TS - 301)}
    with pytest.raises(StaleTimestamp):
        verify(Profile(STANDARD, (WHSEC,)), stale, BODY, NOW)


# --- the generic hmac ----------------------------------------------------------------------------

HMAC_SECRET = "vendor-shared-secret"


def mac(secret: str, message: bytes, algorithm: str = "sha256", encoding: str = "hex") -> str:
    digest = hmac.new(secret.encode(), message, getattr(hashlib, algorithm)).digest()
    return digest.hex() if encoding == "hex" else base64.b64encode(digest).decode()


@pytest.mark.parametrize("algorithm", ["sha1", "sha256", "sha512"])
@pytest.mark.parametrize("encoding", ["hex", "base64"])
def test_hmac_of_the_body_each_algorithm_and_encoding(algorithm: str, encoding: str) -> None:
    params = HmacParams(header="X-Signature", algorithm=algorithm, encoding=encoding, prefix="v1=")
    profile = Profile(HMAC, ("old", HMAC_SECRET), params)
    good = {"X-Signature": "v1=" + mac(HMAC_SECRET, BODY, algorithm, encoding)}
    assert verify(profile, good, BODY, NOW) == Verified("sha256:" + hashlib.sha256(BODY).hexdigest())
    assert reason(profile, good, BODY + b" ") == "bad_signature"
    assert reason(profile, {"X-Signature": "v1=" + mac("wrong", BODY, algorithm, encoding)}) == "bad_signature"
    assert reason(profile, {"X-Signature": mac(HMAC_SECRET, BODY, algorithm, encoding)}) == "malformed_header"
    assert reason(profile, {}) == "missing_header"


def test_hmac_with_a_timestamp_header_checks_the_tolerance() -> None:
    params = HmacParams("X-Sig", "sha256", "hex", "", "X-Timestamp", "timestamp-body", ":")
    profile = Profile(HMAC, (HMAC_SECRET,), params, tolerance_s=300)

    def headers(ts: int, signed_ts: int | None = None) -> dict[str, str]:
        signed = str(signed_ts if signed_ts is not None else ts).encode() + b":" + BODY
        return {"X-Sig": mac(HMAC_SECRET, signed), "X-Timestamp": str(ts)}

    assert verify(profile, headers(TS), BODY, NOW)
    assert reason(profile, headers(TS - 301)) == "stale"
    assert reason(profile, headers(TS, signed_ts=TS - 1)) == "bad_signature"  # the stamp is signed
    assert reason(profile, {"X-Sig": mac(HMAC_SECRET, BODY)}) == "missing_header"
    assert reason(profile, {**headers(TS), "X-Timestamp": "12:00"}) == "malformed_header"


def test_hmac_rotation_two_signatures_in_the_header() -> None:
    params = HmacParams(header="X-Sig", prefix="sha256=")
    both = f"sha256={mac('old', BODY)}, sha256={mac(HMAC_SECRET, BODY)}"
    assert verify(Profile(HMAC, (HMAC_SECRET,), params), {"X-Sig": both}, BODY, NOW)
    assert verify(Profile(HMAC, ("old",), params), {"X-Sig": both}, BODY, NOW)


# --- basic ---------------------------------------------------------------------------------------


def basic(pair: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


def test_basic_accepts_any_configured_pair_and_refuses_others() -> None:
    profile = Profile(BASIC, ("vendor:old-password", "vendor:new-password"))
    assert verify(profile, basic("vendor:new-password"), BODY, NOW)
    assert verify(profile, basic("vendor:old-password"), BODY, NOW)
    assert reason(profile, basic("vendor:wrong")) == "bad_signature"
    assert reason(profile, basic("other:new-password")) == "bad_signature"
    assert reason(profile, {"Authorization": "Bearer x"}) == "malformed_header"
    assert reason(profile, {"Authorization": "Basic !!!"}) == "malformed_header"
    assert reason(profile, basic("no-colon")) == "malformed_header"
    assert reason(profile, {}) == "missing_header"


# --- token-url and confirm -----------------------------------------------------------------------

TOKEN = "A" * 43


def test_token_url_returns_the_digest_and_refuses_a_missing_or_malformed_token() -> None:
    assert verify(Profile(TOKEN_URL), {}, BODY, NOW, TOKEN).token_digest == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert token_digest(TOKEN) == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert reason(Profile(TOKEN_URL), {}) == "missing_token"
    for bad in ("short", "A" * 42 + "/", "A" * 200, "é" * 43):
        assert reason(Profile(TOKEN_URL), {}, token=bad) == "malformed_token"


def test_confirm_proves_nothing_and_says_so() -> None:
    verified = verify(Profile(CONFIRM), {}, BODY, NOW)
    assert verified.hint and verified.event_id.startswith("sha256:")


# --- event ids -----------------------------------------------------------------------------------


def test_event_id_sources() -> None:
    assert EventIdSource.parse("header:X-Request-Id") == EventIdSource("header", "X-Request-Id")
    assert EventIdSource.parse("pointer:/data/id") == EventIdSource("pointer", "/data/id")
    assert EventIdSource.parse("digest") == EventIdSource("digest")
    for bad in ("", "header:", "header:a b", "pointer:id", "digest:x", "body"):
        with pytest.raises(ValueError):
            EventIdSource.parse(bad)
    profile = Profile(CONFIRM, event_id=EventIdSource("pointer", "/a~1b/0"))
    assert verify(profile, {}, b'{"a/b":[7]}', NOW).event_id == "7"
    for body in (b'{"a/b":[]}', b"[1]", b"{"):
        with pytest.raises(SignatureError):
            verify(profile, {}, body, NOW)


def test_check_secret_depends_on_the_scheme() -> None:
    check_secret(STANDARD, WHSEC)
    check_secret(STRIPE, STRIPE_SECRET)  # not base64 after whsec_: fine for Stripe
    check_secret(GITHUB, GITHUB_SECRET)
    check_secret(BASIC, "user:pass:word")
    with pytest.raises(ValueError):
        check_secret(STANDARD, STRIPE_SECRET)
    for bad in ("user", ":pass", "user:"):
        with pytest.raises(ValueError):
            check_secret(BASIC, bad)


def test_a_profile_repr_shows_no_secret() -> None:
    assert STRIPE_SECRET not in repr(STRIPE_PROFILE)


# --- totality ------------------------------------------------------------------------------------

PROFILES = [
    Profile(STANDARD, (WHSEC,)),
    STRIPE_PROFILE,
    GITHUB_PROFILE,
    Profile(HMAC, (HMAC_SECRET,), HmacParams("X-Sig", "sha512", "base64", "v1=", "X-Ts", "timestamp-body", ".")),
    Profile(HMAC, (HMAC_SECRET,), HmacParams("X-Sig", "sha1", "hex")),
    Profile(BASIC, ("u:p",)),
    Profile(TOKEN_URL),
    Profile(CONFIRM, event_id=EventIdSource("pointer", "/id")),
    Profile(HMAC, (HMAC_SECRET,), HmacParams("X-Sig"), event_id=EventIdSource("header", "X-Id")),
]
NAMES = st.sampled_from(
    ["Stripe-Signature", "X-Hub-Signature-256", "X-GitHub-Delivery", "X-Sig", "X-Ts", "X-Id", "Authorization",
     "webhook-id", "webhook-timestamp", "webhook-signature", "svix-id"]
) | st.text(max_size=20)  # fmt: skip
VALUES = st.text(max_size=80) | st.from_regex(r"\At=[0-9]{1,14},v1=[0-9a-f]{0,70}\Z") | st.just("sha256=" + "a" * 64)


@given(
    profile=st.sampled_from(PROFILES),
    headers=st.dictionaries(NAMES, VALUES, max_size=6),
    body=st.binary(max_size=200) | st.just(BODY) | st.just(b'{"id":' * 70),
    token=st.none() | st.text(max_size=60) | st.just(TOKEN),
    now=st.floats(allow_nan=True) | st.just(NOW),
)
def test_every_scheme_is_total(profile: Profile, headers: dict[str, str], body: bytes, token, now: float) -> None:
    """Any headers, body, token and clock: a Verified or a SignatureError, never another exception."""
    try:
        verified = verify(profile, headers, body, now, token)
    except SignatureError as exc:
        assert exc.reason
    else:
        assert isinstance(verified.event_id, str) and verified.event_id


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_has_a_verifier_and_a_default_event_id(scheme: str) -> None:
    """An empty request: only ``confirm`` (a hint, nothing proven) passes; every other scheme refuses."""
    if scheme == CONFIRM:
        assert verify(Profile(scheme), {}, b"", NOW).hint
    else:
        assert reason(Profile(scheme), {}, b"") in {"missing_header", "missing_token"}
