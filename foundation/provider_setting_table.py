"""One provider's settings, declared once: the ``LIAISON_PROVIDER_<NAME>_*`` block, one ``Option`` row
each (variable, attribute, parser, default, doc, secret?), which every name in ``LIAISON_PROVIDERS``
fills in with its own. A table of its own because it is read once per provider, not once per process:
``foundation.provider_settings`` reads it, and ``app.settings_docs`` writes it into ``.env.example``
and docs/settings.md after the process-wide rows of ``foundation.setting_table``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foundation.options import (
    AMQP_URL,
    EVENT_ID,
    HEADER_NAME,
    OPTIONAL_DELAYS,
    OPTIONAL_HTTP_URL,
    TEXT,
    VENDOR_PROFILE,
    WEBHOOK_SCHEME,
    WEBHOOK_SECRETS,
    ConfigError,
    Option,
    check_webhook_secrets,
    choice,
    decimal,
    integer,
    optional_int,
    section,
)
from webhooks.schemes import SECRETLESS, STANDARD


def _scheme_fits_kind(env: str, scheme: str, earlier: Mapping[str, Any]) -> None:
    """An amqp vendor's events and status replies are both checked as Standard Webhooks."""
    if earlier["kind"] == "amqp" and scheme != STANDARD:
        raise ConfigError(f"{env} must be {STANDARD} for an amqp provider")


def _poll_schedule(env: str, schedule: tuple[float, ...] | None, earlier: Mapping[str, Any]) -> None:
    """A poll every beat run or faster would ask the vendor as fast as its rate limit lets it."""
    if schedule is not None and any(delay < 1 for delay in schedule):
        raise ConfigError(f"{env}: each delay must be at least 1 second")


def _profile_fits_kind(env: str, profile: Any, earlier: Mapping[str, Any]) -> None:
    if profile is not None and earlier["kind"] != "http":
        raise ConfigError(f"{env} is for an http provider only")


def _hmac(values: Mapping[str, Any]) -> bool:
    return bool(values["webhook_scheme"] == "hmac")


# The table is data, one setting a row: kept as written rather than one argument a line.
# fmt: off

#: Stands for ``LIAISON_PROVIDER_<NAME>_`` in the provider rows; each provider fills in its name.
PROVIDER_PREFIX = _S = "LIAISON_PROVIDER_<NAME>_"
PROVIDER_SECTION = section(
    "One provider: LIAISON_PROVIDER_<NAME>_* for each name in LIAISON_PROVIDERS (the demo's is SIMULATOR)",
    Option(_S + "KIND", "kind", choice("rest", "amqp", "http"), "rest",
           "adapter: rest (HTTP + webhooks, Liaison's own API shape), amqp (commands and events over RabbitMQ, "
           "issue 13) or http (a vendor's own REST API and events, described by the PROFILE file)"),
    Option(_S + "PROFILE", "vendor_profile", VENDOR_PROFILE, "",
           "http: the vendor profile, a TOML file (docs/design.md §5, examples in docs/profiles/), read and "
           "checked at start-up; it holds no secret (its headers name {api_key}, filled from API_KEY); "
           "required for http", required_when=lambda v: v["kind"] == "http", check=_profile_fits_kind),
    Option(_S + "BASE_URL", "base_url", OPTIONAL_HTTP_URL, "", "where the vendor's API is (required for rest and "
           "http: an http profile's paths are under it)",
           example="http://127.0.0.1:5001", required_when=lambda v: v["kind"] in ("rest", "http")),
    Option(_S + "AMQP_URL", "amqp_url", AMQP_URL, "", "amqp: the vendor's RabbitMQ, amqp://user:pass@host:5672/vhost "
           "(required for amqp)", secret=True, required_when=lambda v: v["kind"] == "amqp"),
    Option(_S + "WEBHOOK_SCHEME", "webhook_scheme", WEBHOOK_SCHEME, STANDARD,
           "how its webhooks prove they are its own (docs/design.md §5): standard-webhooks (webhook-* or svix-* "
           "headers), stripe (Stripe-Signature), github (X-Hub-Signature-256), hmac (the HMAC_ rows below), "
           "basic (Authorization: Basic), token-url (a per-task token in the callback URL given at submit), "
           "confirm (unsigned: a hint, Liaison asks the vendor's status API); amqp: standard-webhooks only",
           check=_scheme_fits_kind),
    Option(_S + "WEBHOOK_SECRETS", "webhook_secrets", WEBHOOK_SECRETS, "",
           "secrets its webhooks (amqp: its event and status messages) are signed with; several while rotating; "
           "standard-webhooks: whsec_<base64>; stripe: its whsec_… as given; github, hmac: the shared secret; "
           "basic: user:password pairs; required but for token-url and confirm", secret=True,
           example="whsec_...,whsec_...", required_when=lambda v: v["webhook_scheme"] not in SECRETLESS,
           check=check_webhook_secrets),
    Option(_S + "WEBHOOK_EVENT_ID", "webhook_event_id", EVENT_ID, "",
           "the event id deduplicated on: header:<Name>, pointer:/json/pointer into the body, or digest "
           "(SHA-256 of the body); empty: the scheme's (standard-webhooks: webhook-id; stripe: pointer:/id; "
           "github: header:X-GitHub-Delivery; the others: digest)"),
    Option(_S + "WEBHOOK_HMAC_HEADER", "webhook_hmac_header", HEADER_NAME, "",
           "hmac: the header the signature is in (required for hmac)", required_when=_hmac),
    Option(_S + "WEBHOOK_HMAC_ALGORITHM", "webhook_hmac_algorithm", choice("sha1", "sha256", "sha512"), "sha256",
           "hmac: the digest"),
    Option(_S + "WEBHOOK_HMAC_ENCODING", "webhook_hmac_encoding", choice("hex", "base64"), "hex",
           "hmac: how the signature is written"),
    Option(_S + "WEBHOOK_HMAC_PREFIX", "webhook_hmac_prefix", TEXT, "",
           "hmac: text before the signature, e.g. sha256= (several signatures may be space- or comma-separated)"),
    Option(_S + "WEBHOOK_HMAC_SIGNED_CONTENT", "webhook_hmac_signed_content", choice("body", "timestamp-body"),
           "body", "hmac: what is signed: the body, or the timestamp header's value, the separator and the body "
           "(then the timestamp must be within LIAISON_WEBHOOK_TOLERANCE_S)"),
    Option(_S + "WEBHOOK_HMAC_SEPARATOR", "webhook_hmac_separator", TEXT, ".",
           "hmac: between the timestamp and the body in timestamp-body"),
    Option(_S + "WEBHOOK_HMAC_TIMESTAMP_HEADER", "webhook_hmac_timestamp_header", HEADER_NAME, "",
           "hmac: the header of the unix timestamp (required for timestamp-body)",
           required_when=lambda v: _hmac(v) and v["webhook_hmac_signed_content"] == "timestamp-body"),
    Option(_S + "COMMAND_QUEUE", "command_queue", TEXT, "", "amqp: the vendor's queue our commands go to "
           "(default <name>.commands)"),
    Option(_S + "REPLY_QUEUE", "reply_queue", TEXT, "", "amqp: our queue its events arrive on, the reply-to of "
           "every submit and cancel (default liaison.<name>.events; rejects go to <queue>.dead)"),
    Option(_S + "API_KEY", "api_key", TEXT, "", "rest: sent as Authorization: Bearer, if set; http: the profile's "
           "{api_key}", secret=True),
    Option(_S + "CONNECT_TIMEOUT_S", "connect_timeout_s", decimal(0.01), "3.05",
           "TCP connect to the vendor (amqp: to its broker)"),
    Option(_S + "READ_TIMEOUT_S", "read_timeout_s", decimal(0.01), "10", "rest: between bytes of the vendor's answer"),
    Option(_S + "ACCEPTANCE_TIMEOUT_S", "acceptance_timeout_s", optional_int(), "",
           "default deadline for its tasks to reach accepted"),
    Option(_S + "EXECUTION_TIMEOUT_S", "execution_timeout_s", optional_int(), "",
           "default deadline for its tasks to reach a final state"),
    Option(_S + "HEARTBEAT_TIMEOUT_S", "heartbeat_timeout_s", optional_int(), "",
           "default heartbeat: no vendor event for this long asks the vendor (a task may set its own)"),
    Option(_S + "SUBMIT_MAX_ATTEMPTS", "submit_max_attempts", integer(1), "6", "submit/cancel attempts in all"),
    Option(_S + "SUBMIT_BACKOFF_BASE_S", "submit_backoff_base_s", decimal(0.0), "2", "first retry wait, doubling"),
    Option(_S + "SUBMIT_BACKOFF_CAP_S", "submit_backoff_cap_s", decimal(0.0), "300", "longest retry wait"),
    Option(_S + "SUBMIT_MAX_TOTAL_S", "submit_max_total_s", decimal(1.0), "86400",
           "no submit/cancel retry starts later than this after the first try"),
    Option(_S + "POLL_SCHEDULE_S", "poll_schedule_s", OPTIONAL_DELAYS, "",
           "poll its open jobs (a vendor that sends no webhooks, or as a safety net): seconds from the submit's "
           "answer to the first poll, then between polls, the last one repeated, each jittered by 10%; within "
           "RATE_LIMIT_PER_S, fairly across clients (docs/design.md §5); e.g. 5,15,60,300; empty = no polling",
           example="", check=_poll_schedule),
    Option(_S + "RECONCILE_AFTER_S", "reconcile_after_s", integer(1), "900",
           "a task quiet this long at the vendor is asked about"),
    Option(_S + "RATE_LIMIT_PER_S", "rate_limit_per_s", decimal(0.01), "10",
           "calls per second (submit, cancel, status, find), all processes together"),
    Option(_S + "RATE_LIMIT_BURST", "rate_limit_burst", integer(1), "1", "calls at once after a quiet spell"),
    Option(_S + "MAX_IN_FLIGHT", "max_in_flight", integer(0), "0",
           "jobs kept open at the vendor at once (submitted, not final), all clients sharing them by weight; "
           "0 = no limit"),
    Option(_S + "MAX_CONCURRENT_CALLS", "max_concurrent_calls", optional_int(), "",
           "calls to this vendor one calls process makes at once (its threads: LIAISON_CALL_THREADS); "
           "empty or 0 = all of them when it is the only provider, else half, so a slow vendor never holds "
           "every thread another vendor needs"),
    Option(_S + "CALL_DEADLINE_S", "call_deadline_s", decimal(0.01), "30",
           "one call, connect to last body byte, ends by this (amqp: a publish's confirm, a status reply)"),
)

# fmt: on

PROVIDER_OPTIONS: tuple[Option, ...] = PROVIDER_SECTION.options
