"""The simulator's vendor personalities, pure parts: its signatures checked by code nobody here wrote
(GitHub's published vector, Stripe's own library) and by Liaison's verifiers (``webhooks.schemes``),
the settings each personality needs, and where a token-url vendor may call back."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import stripe
from hypothesis import given
from hypothesis import strategies as st

from app.settings_docs import OTHER_SECTIONS
from simulator import settings as settings_module
from simulator.behaviour import Behaviour
from simulator.callbacks import callback_allowed
from simulator.personality import envelope, github_delivery, headers, stripe_event_id
from simulator.settings import Settings, SettingsError, load_settings
from simulator.signers import github_signature_256, stripe_signature
from simulator.store import new_job, numeric_job_id
from webhooks import schemes
from webhooks.signing import generate_secret

STRIPE_SECRET = "whsec_" + "a1B2c3D4" * 4  # the form of a Stripe endpoint secret
GITHUB_SECRET = "It's a Secret to Everybody"
MSG_ID = "msg_" + "0123456789abcdef" * 2
bodies = st.binary(max_size=2048).map(lambda raw: raw.hex().encode())  # any printable body


def _settings(personality: str, secret: str = "", **extra: str) -> Settings:
    config = {"SIMULATOR_PERSONALITY": personality, "SIMULATOR_WEBHOOK_SECRET": secret, **extra}
    return load_settings(config, environ={})


# --- signatures ----------------------------------------------------------------------------------


def test_github_signature_matches_githubs_published_vector() -> None:
    """docs.github.com, "Validating webhook deliveries": the secret, payload and digest below."""
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert github_signature_256(GITHUB_SECRET, b"Hello, World!") == expected


@given(body=bodies, t=st.integers(min_value=1, max_value=4_000_000_000))
def test_stripe_signature_verifies_with_stripes_own_library(body: bytes, t: int) -> None:
    header = stripe_signature(STRIPE_SECRET, body, t)
    assert stripe.WebhookSignature.verify_header(body, header, STRIPE_SECRET, tolerance=None)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(body + b"x", header, STRIPE_SECRET, tolerance=None)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(body, header, STRIPE_SECRET + "x", tolerance=None)


def test_stripe_library_refuses_a_stale_simulator_signature() -> None:
    header = stripe_signature(STRIPE_SECRET, b"{}", int(time.time()) - 3600)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(b"{}", header, STRIPE_SECRET, tolerance=300)


#: made once at import: each test process has its own, which is fine for a secret used within one test
LIAISON_SECRET = generate_secret()


@pytest.mark.parametrize(
    ("personality", "secret", "scheme"),
    [
        ("stripe", STRIPE_SECRET, schemes.STRIPE),
        ("github", GITHUB_SECRET, schemes.GITHUB),
        ("liaison", LIAISON_SECRET, schemes.STANDARD),
    ],
    ids=["stripe", "github", "liaison"],  # a secret in a test id differs between xdist's workers
)
@given(body=bodies)
def test_liaisons_verifiers_accept_what_each_personality_sends(
    personality: str, secret: str, scheme: str, body: bytes
) -> None:
    """The cross-check: each personality's headers verify under the scheme of the same name, with
    the same secret as configured, and not with another secret."""
    settings = _settings(personality, secret, SIMULATOR_WEBHOOK_URL="http://127.0.0.1:9/hooks")
    now = time.time()
    sent = headers(settings, MSG_ID, body, now)
    event_id = schemes.EventIdSource("digest")
    profile = schemes.Profile(scheme=scheme, secrets=(secret,), event_id=event_id)
    assert schemes.verify(profile, sent, body, now).event_id.startswith("sha256:")
    other = replace(profile, secrets=(generate_secret(),))
    with pytest.raises(schemes.SignatureError):
        schemes.verify(other, sent, body, now)


def test_envelopes_carry_the_ids_liaisons_schemes_deduplicate_on() -> None:
    """Stripe's event id is the body's ``/id``, GitHub's the ``X-GitHub-Delivery`` header: both
    derive from the simulator's one id per event, so a re-send or duplicate keeps them."""
    job = new_job("k", "ref-1", {}, "", Behaviour(), job_id=numeric_job_id())
    job = replace(job, status="succeeded", outcome={"ok": True})
    payload = {"type": "job.completed", "job_id": job.job_id, "status": "succeeded", "outcome": {"ok": True}}
    now = time.time()

    body = json.dumps(envelope("stripe", job, payload, MSG_ID, now)).encode()
    sent = headers(_settings("stripe", STRIPE_SECRET, SIMULATOR_WEBHOOK_URL="http://127.0.0.1:9/"), MSG_ID, body, now)
    verified = schemes.verify(schemes.Profile(scheme=schemes.STRIPE, secrets=(STRIPE_SECRET,)), sent, body, now)
    assert verified.event_id == stripe_event_id(MSG_ID) == "evt_" + MSG_ID.removeprefix("msg_")
    event = stripe.Webhook.construct_event(body, sent["Stripe-Signature"], STRIPE_SECRET)
    assert event.type == "job.succeeded" and event.data.object["reference"] == "ref-1"

    body = json.dumps(envelope("github", job, payload, MSG_ID, now)).encode()
    sent = headers(_settings("github", GITHUB_SECRET, SIMULATOR_WEBHOOK_URL="http://127.0.0.1:9/"), MSG_ID, body, now)
    verified = schemes.verify(schemes.Profile(scheme=schemes.GITHUB, secrets=(GITHUB_SECRET,)), sent, body, now)
    assert verified.event_id == sent["X-GitHub-Delivery"] == github_delivery(MSG_ID)
    assert json.loads(body)["job"]["conclusion"] == "success"


def test_token_url_and_liaison_envelopes_are_the_contracts_body() -> None:
    job = new_job("k", "ref-1", {}, "http://127.0.0.1:9/t/x", Behaviour())
    payload = {"type": "job.accepted", "job_id": job.job_id}
    assert envelope("token-url", job, payload, MSG_ID, 0) == payload == envelope("liaison", job, payload, MSG_ID, 0)
    sent = headers(_settings("token-url"), MSG_ID, b"{}")
    assert sent == {"Content-Type": "application/json"}  # unsigned: the URL is the proof


# --- settings ------------------------------------------------------------------------------------


def test_liaison_is_the_default_and_keeps_its_secret_rules() -> None:
    assert load_settings({"SIMULATOR_WEBHOOK_SECRET": generate_secret()}, environ={}).personality == "liaison"
    with pytest.raises(SettingsError, match="SIMULATOR_WEBHOOK_SECRET"):
        _settings("liaison", GITHUB_SECRET)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"SIMULATOR_PERSONALITY": "paypal"}, "SIMULATOR_PERSONALITY"),
        ({"SIMULATOR_PERSONALITY": "stripe", "SIMULATOR_WEBHOOK_SECRET": STRIPE_SECRET}, "SIMULATOR_WEBHOOK_URL"),
        (
            {
                "SIMULATOR_PERSONALITY": "stripe",
                "SIMULATOR_WEBHOOK_SECRET": "sk_live_nope",
                "SIMULATOR_WEBHOOK_URL": "http://127.0.0.1:9/",
            },
            "whsec_",
        ),
        ({"SIMULATOR_PERSONALITY": "github", "SIMULATOR_WEBHOOK_URL": "http://127.0.0.1:9/"}, "SECRET"),
        (
            {"SIMULATOR_PERSONALITY": "github", "SIMULATOR_WEBHOOK_SECRET": "s", "SIMULATOR_WEBHOOK_URL": "ftp://x"},
            "URL",
        ),
        ({"SIMULATOR_PERSONALITY": "poll-only", "SIMULATOR_AMQP_URL": "amqp://127.0.0.1"}, "liaison"),
        ({"SIMULATOR_PERSONALITY": "token-url", "SIMULATOR_CALLBACK_ORIGINS": "http://a.example/path"}, "ORIGINS"),
    ],
)
def test_each_personality_refuses_a_configuration_it_cannot_work_with(config: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message) as caught:
        load_settings(config, environ={})
    assert STRIPE_SECRET not in str(caught.value) and "sk_live_nope" not in str(caught.value)


def test_unsigned_personalities_need_no_secret_and_github_takes_any_text() -> None:
    assert _settings("poll-only").personality == "poll-only"
    settings = _settings("token-url", SIMULATOR_CALLBACK_ORIGINS="HTTP://Hooks.Example:80/, https://b.example:8443")
    assert settings.callback_origins == ("http://hooks.example", "https://b.example:8443")
    github = _settings("github", GITHUB_SECRET, SIMULATOR_WEBHOOK_URL="http://127.0.0.1:9/h")
    assert github.webhook_secret == GITHUB_SECRET


# --- where token-url calls back ------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:5000/webhooks/sim/t/x", "http://127.8.9.10/x", "https://[::1]:8443/x", "http://localhost:1/x"],
)
def test_with_no_origins_configured_loopback_only_is_called_back(url: str) -> None:
    assert callback_allowed(url, ())


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://hooks.example/x",  # a name: never resolved, never trusted
        "http://127.0.0.1@hooks.example/x",  # userinfo: ambiguous authority
        "http://hooks.example\\@127.0.0.1/x",
        "ftp://127.0.0.1/x",
        "not a url",
    ],
)
def test_with_no_origins_configured_anything_else_is_refused(url: str) -> None:
    assert not callback_allowed(url, ())


def test_configured_origins_are_the_only_ones_called_back() -> None:
    origins = ("http://127.0.0.1:5000", "https://hooks.example")
    assert callback_allowed("http://127.0.0.1:5000/webhooks/sim/t/x", origins)
    assert callback_allowed("https://HOOKS.example:443/a", origins)
    assert not callback_allowed("http://127.0.0.1:5001/webhooks/sim/t/x", origins)  # loopback, other origin
    assert not callback_allowed("http://hooks.example/a", origins)  # other scheme


def test_every_setting_the_simulator_reads_is_documented() -> None:
    read = set(re.findall(r'"(SIMULATOR_[A-Z_]+)"', Path(settings_module.__file__).read_text()))
    documented = {o.env for section in OTHER_SECTIONS for o in section.options}
    assert read and read <= documented, sorted(read - documented)


# --- basic auth on webhooks (SIMULATOR_WEBHOOK_BASIC_AUTH) ---------------------------------------


@pytest.mark.parametrize(
    ("personality", "secret"),
    [("liaison", LIAISON_SECRET), ("github", GITHUB_SECRET), ("token-url", "")],
    ids=["liaison", "github", "token-url"],  # a secret in a test id differs between xdist's workers
)
def test_basic_auth_knob_puts_a_header_liaisons_basic_scheme_accepts(personality: str, secret: str) -> None:
    hooks = "http://127.0.0.1:9/hooks"
    settings = _settings(personality, secret, SIMULATOR_WEBHOOK_URL=hooks, SIMULATOR_WEBHOOK_BASIC_AUTH="acme:s3cr:et")
    body = b'{"type": "job.completed"}'
    sent = headers(settings, MSG_ID, body)
    profile = schemes.Profile(scheme=schemes.BASIC, secrets=("acme:s3cr:et",))
    assert schemes.verify(profile, sent, body, time.time()).event_id.startswith("sha256:")
    wrong = schemes.Profile(scheme=schemes.BASIC, secrets=("acme:other",))
    with pytest.raises(schemes.SignatureError):
        schemes.verify(wrong, sent, body, time.time())
    if personality == "github":  # the personality's own proof is still there beside it
        assert sent["X-Hub-Signature-256"] == github_signature_256(GITHUB_SECRET, body)
    assert "s3cr" not in repr(settings)


def test_without_the_basic_auth_knob_no_authorization_header_is_sent() -> None:
    assert "Authorization" not in headers(_settings("liaison", generate_secret()), MSG_ID, b"{}")


@pytest.mark.parametrize("value", ["acme", ":pw", "acme:", "ac\nme:pw"])
def test_a_basic_auth_knob_that_is_not_user_password_refuses_to_start(value: str) -> None:
    with pytest.raises(SettingsError, match="SIMULATOR_WEBHOOK_BASIC_AUTH") as caught:
        _settings("liaison", generate_secret(), SIMULATOR_WEBHOOK_BASIC_AUTH=value)
    assert value not in str(caught.value)
