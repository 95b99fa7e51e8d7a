"""A provider's inbound scheme settings: today's settings read as before (standard-webhooks), the
secrets' form depends on the scheme, and each bad combination stops start-up with one line naming the
variable and never the value."""

from __future__ import annotations

import pytest

from foundation.options import ConfigError
from foundation.provider_settings import ProviderSettings
from webhooks.schemes import EventIdSource, Profile
from webhooks.signing import generate_secret

P = "LIAISON_PROVIDER_V_"
BASE = {P + "BASE_URL": "http://127.0.0.1:9"}
STRIPE_SECRET = "whsec_LiteralStripeSecret!"  # not base64 after whsec_


def read(**env: str) -> ProviderSettings:
    return ProviderSettings.from_env({**BASE, **{P + k: v for k, v in env.items()}}, "v")


def refused(**env: str) -> str:
    with pytest.raises(ConfigError) as info:
        read(**env)
    return str(info.value)


def test_todays_settings_read_unchanged_as_standard_webhooks() -> None:
    secret = generate_secret()
    ps = read(WEBHOOK_SECRETS=secret)
    assert ps.webhook_scheme == "standard-webhooks" and ps.webhook_secrets == (secret,)
    assert ps.inbound_profile(300) == Profile("standard-webhooks", (secret,), tolerance_s=300)
    assert "WEBHOOK_SECRETS is required" in refused()
    assert "not valid base64" in refused(WEBHOOK_SECRETS=STRIPE_SECRET)


def test_the_secrets_form_is_the_schemes() -> None:
    assert read(WEBHOOK_SCHEME="stripe", WEBHOOK_SECRETS=STRIPE_SECRET).webhook_secrets == (STRIPE_SECRET,)
    assert read(WEBHOOK_SCHEME="github", WEBHOOK_SECRETS="It's a Secret to Everybody").webhook_secrets
    assert read(WEBHOOK_SCHEME="basic", WEBHOOK_SECRETS="u:p,u:q").webhook_secrets == ("u:p", "u:q")
    message = refused(WEBHOOK_SCHEME="basic", WEBHOOK_SECRETS="justapassword")
    assert message.startswith(P + "WEBHOOK_SECRETS") and "justapassword" not in message
    for scheme in ("stripe", "github", "basic"):
        assert refused(WEBHOOK_SCHEME=scheme) == f"{P}WEBHOOK_SECRETS is required for provider 'v'"


def test_token_url_needs_no_secret() -> None:
    assert read(WEBHOOK_SCHEME="token-url").webhook_secrets == ()


def test_confirm_needs_no_secret_and_is_rest_only() -> None:
    """Its hints prove nothing and ask the vendor's status API (service.checks): no secret; an amqp
    vendor's events are signed, so it keeps standard-webhooks."""
    assert read(WEBHOOK_SCHEME="confirm").webhook_scheme == "confirm"
    amqp = {"KIND": "amqp", "AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"}
    assert (
        refused(**amqp, WEBHOOK_SCHEME="confirm") == f"{P}WEBHOOK_SCHEME must be standard-webhooks for an amqp provider"
    )


def test_hmac_needs_its_header_and_a_timestamp_header_for_timestamp_body() -> None:
    assert refused(WEBHOOK_SCHEME="hmac", WEBHOOK_SECRETS="s") == f"{P}WEBHOOK_HMAC_HEADER is required for provider 'v'"
    hmac_env = {"WEBHOOK_SCHEME": "hmac", "WEBHOOK_SECRETS": "s", "WEBHOOK_HMAC_HEADER": "X-Sig"}
    assert read(**hmac_env).inbound_profile(300).hmac.header == "X-Sig"
    assert refused(**hmac_env, WEBHOOK_HMAC_SIGNED_CONTENT="timestamp-body").startswith(
        P + "WEBHOOK_HMAC_TIMESTAMP_HEADER is required"
    )
    assert refused(**hmac_env, WEBHOOK_HMAC_ALGORITHM="md5").startswith(P + "WEBHOOK_HMAC_ALGORITHM must be one of")
    assert refused(**{**hmac_env, "WEBHOOK_HMAC_HEADER": "X Sig"}).startswith(P + "WEBHOOK_HMAC_HEADER must be")


def test_event_id_source_and_scheme_names_are_checked() -> None:
    secret = generate_secret()
    assert read(WEBHOOK_SECRETS=secret, WEBHOOK_EVENT_ID="pointer:/data/id").webhook_event_id == EventIdSource(
        "pointer", "/data/id"
    )
    assert refused(WEBHOOK_SECRETS=secret, WEBHOOK_EVENT_ID="body").startswith(P + "WEBHOOK_EVENT_ID must be")
    assert refused(WEBHOOK_SCHEME="svix").startswith(P + "WEBHOOK_SCHEME must be one of")


def test_an_amqp_provider_keeps_standard_webhooks() -> None:
    amqp = {"KIND": "amqp", "AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"}
    assert refused(**amqp, WEBHOOK_SCHEME="github", WEBHOOK_SECRETS="s") == (
        f"{P}WEBHOOK_SCHEME must be standard-webhooks for an amqp provider"
    )


def test_no_secret_in_the_repr() -> None:
    ps = read(WEBHOOK_SCHEME="basic", WEBHOOK_SECRETS="vendor:hunter2-password")
    assert "hunter2" not in repr(ps) and "hunter2" not in repr(ps.inbound_profile(300))
