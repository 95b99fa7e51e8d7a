"""One frozen settings object, read from the environment once and shared by web, worker and beat.

Every setting is declared once, as data: a row of ``OPTIONS`` (or ``PROVIDER_OPTIONS`` for the
``LIAISON_PROVIDER_<NAME>_*`` block) holds its variable, attribute, parser, default and doc.
``Settings.from_env`` is derived from those rows, and so are ``.env.example`` and docs/settings.md
(``python -m app.settings_docs``; a unit test keeps both files equal to what it prints). A bad value
fails at start-up with a message that names the variable, never its value. Rules that tie several
settings together live in ``Settings.validate``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from core.outbound_guard import AllowList
from webhooks.bounded_json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING, JsonLimits
from webhooks.signing import DEFAULT_TOLERANCE_S, decode_secret

#: Redis redelivers a message not acked within this; celeryconfig uses the same number.
VISIBILITY_TIMEOUT_S = 12 * 3600
#: A bearer token (admin API, /metrics) is a credential: no shorter than this.
MIN_ADMIN_TOKEN_LEN = MIN_METRICS_TOKEN_CHARS = 32
_REDIS_SCHEMES = ("redis://", "rediss://")
#: ``scheme://user:password@`` and ``scheme://:password@`` (Redis): the password part of a URL.
_URL_PASSWORD = re.compile(r"(?<=://)([^:/@\s]*):([^@/\s]+)@")


def mask_url_password(url: str) -> str:
    """``redis://:***@host``: a URL fit to show, with any password masked (the user name stays)."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable, never its value."""


# --- parsers: (variable, text) -> value; the text is stripped, "" only where "" is the default ---


@dataclass(frozen=True)
class Parser:
    convert: Callable[[str, str], Any]
    kind: str  # what the docs' table says the value is


def _number(cast: Callable[[str], float], minimum: float, kind: str) -> Parser:
    def convert(name: str, raw: str) -> Any:
        try:
            value = cast(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number") from None
        if not math.isfinite(value):  # "nan" would pass every comparison: a limit that never bites
            raise ConfigError(f"{name} must be a finite number")
        if value < minimum:
            raise ConfigError(f"{name} must be at least {minimum}")
        return value

    return Parser(convert, f"{kind} ≥ {minimum:g}")


def integer(minimum: int = 0) -> Parser:
    return _number(int, minimum, "integer")


def decimal(minimum: float = 0.0) -> Parser:
    return _number(float, minimum, "number")


def optional_int() -> Parser:
    """Seconds, or empty / 0 for none."""
    whole = integer(0)
    return Parser(lambda name, raw: (whole.convert(name, raw) or None) if raw else None, "integer ≥ 0, 0 = none")


def choice(*choices: str, upper: bool = False) -> Parser:
    def convert(name: str, raw: str) -> str:
        if raw.lower() not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}")
        return raw.upper() if upper else raw.lower()

    return Parser(convert, " | ".join(choices))


def _text(name: str, raw: str) -> str:
    return raw


def _http_url(name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name} must be an http(s) URL")
    return raw.rstrip("/")


def _delays(name: str, raw: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in raw.split(","))
    except ValueError:
        raise ConfigError(f"{name} must be comma-separated seconds") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ConfigError(f"{name} must be finite and not negative")
    return values


def _webhook_secrets(name: str, raw: str) -> tuple[str, ...]:
    values = tuple(s.strip() for s in raw.split(",") if s.strip())
    for value in values:
        try:
            decode_secret(value)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return values


def _allow_list(name: str, raw: str) -> AllowList:
    try:
        return AllowList.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _names(name: str, raw: str) -> tuple[str, ...]:
    names = tuple(n.strip().lower() for n in raw.split(",") if n.strip())
    if not all(n.isidentifier() for n in names):
        raise ConfigError(f"{name} must be comma-separated simple names")
    return names


def token(minimum: int, hint: str = "") -> Parser:
    def convert(name: str, raw: str) -> str:
        if raw and len(raw) < minimum:
            raise ConfigError(f"{name} must be at least {minimum} characters{hint}")
        return raw

    return Parser(convert, f"secret, ≥ {minimum} characters or empty")


TEXT = Parser(_text, "text")
HTTP_URL = Parser(_http_url, "http(s) URL")
DELAYS = Parser(_delays, "seconds, comma-separated")
WEBHOOK_SECRETS = Parser(_webhook_secrets, "whsec_… secrets, comma-separated")
ALLOW_LIST = Parser(_allow_list, "host, host:port or CIDR, comma-separated")
NAMES = Parser(_names, "names, comma-separated")


@dataclass(frozen=True)
class Option:
    """One variable. Unset or blank means ``default`` (or, with ``derive``, a value computed from
    the options read before it; ``default`` then says how, for the docs)."""

    env: str
    attr: str  # the Settings attribute it fills
    parser: Parser
    default: str = ""
    doc: str = ""
    secret: bool = False  # left out of reprs, logs and the docs' examples
    example: str | None = None  # a demo value .env.example shows instead of the default
    derive: Callable[[Mapping[str, Any]], str] | None = None
    required: bool = False

    def read(self, env: Mapping[str, str], earlier: Mapping[str, Any], what: str = "") -> Any:
        raw = env.get(self.env, "").strip() or (self.derive(earlier) if self.derive else self.default)
        value = self.parser.convert(self.env, raw) if raw or not self.required else None
        if self.required and not value:
            raise ConfigError(f"{self.env} is required{what}")
        return value


@dataclass(frozen=True)
class Section:
    title: str
    options: tuple[Option, ...]


def _section(title: str, *options: Option) -> Section:
    return Section(title, options)


SECTIONS: tuple[Section, ...] = (
    _section(
        "Storage and broker",
        Option(
            "LIAISON_VAR_DIR",
            "var_dir",
            Parser(lambda n, raw: Path(raw).resolve(), "path"),
            "var",
            "where the embedded SQLite file and broker folders live",
        ),
        Option(
            "DATABASE_URL",
            "database_url",
            TEXT,
            "sqlite:///<LIAISON_VAR_DIR>/liaison.db",
            "production: postgresql+psycopg://user@host/db",
            derive=lambda v: f"sqlite:///{v['var_dir'] / 'liaison.db'}",
        ),
        Option(
            "CELERY_BROKER_URL",
            "broker_url",
            TEXT,
            "filesystem://localhost//",
            "or redis://host:6379/0 or amqp://user:pass@host:5672//",
        ),
        Option(
            "LIAISON_BROKER_FOLDER",
            "broker_folder",
            Parser(lambda n, raw: Path(raw), "path"),
            "<LIAISON_VAR_DIR>/broker",
            "filesystem:// broker only; shared by web, worker, beat, Flower",
            derive=lambda v: str(v["var_dir"] / "broker"),
        ),
    ),
    _section(
        "HTTP",
        Option(
            "LIAISON_PUBLIC_URL",
            "public_url",
            HTTP_URL,
            "http://127.0.0.1:5000",
            "how external systems reach /webhooks/<provider>",
        ),
        Option(
            "LIAISON_ADMIN_TOKEN",
            "admin_token",
            token(
                MIN_ADMIN_TOKEN_LEN,
                " (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
                "or empty to turn the admin API off",
            ),
            "",
            "bearer token for /admin/v1, at least 32 characters; unset = admin API off",
            secret=True,
        ),
        Option("LIAISON_MAX_BODY_BYTES", "max_body_bytes", integer(1024), "262144", "larger request bodies get 413"),
    ),
    _section(
        "Bounded input (issue 8): a task's input and a vendor's outcome",
        Option(
            "LIAISON_MAX_JSON_DEPTH",
            "max_json_depth",
            integer(1),
            str(DEFAULT_MAX_DEPTH),
            f"nesting levels of input/outcome (at most {MAX_DEPTH_CEILING - 2}); deeper: 422 / 400",
        ),
        Option(
            "LIAISON_MAX_INPUT_BYTES",
            "max_input_bytes",
            integer(16),
            str(DEFAULT_MAX_BYTES),
            "canonical JSON bytes of a task's input; larger: 422",
        ),
        Option(
            "LIAISON_MAX_OUTCOME_BYTES",
            "max_outcome_bytes",
            integer(16),
            str(DEFAULT_MAX_BYTES),
            "canonical JSON bytes of a vendor's outcome; larger: 413 / refused",
        ),
    ),
    _section(
        "Providers (external systems); one LIAISON_PROVIDER_<NAME>_* block per name, see below",
        Option("LIAISON_PROVIDERS", "provider_names", NAMES, "", "comma-separated names", example="simulator"),
        Option(
            "LIAISON_DEFAULT_PROVIDER",
            "default_provider",
            TEXT,
            "the only provider, if just one",
            "the provider of a task that names none",
            example="simulator",
            derive=lambda v: v["provider_names"][0] if len(v["provider_names"]) == 1 else "",
        ),
    ),
    _section(
        "Webhooks in, callbacks out",
        Option(
            "LIAISON_WEBHOOK_TOLERANCE_S",
            "webhook_tolerance_s",
            integer(1),
            str(DEFAULT_TOLERANCE_S),
            "webhook-timestamp must be within this, both ways",
        ),
        Option(
            "LIAISON_PROCESSED_RETENTION_S",
            "processed_retention_s",
            integer(1),
            "345600",
            "96 h of inbox dedup; must exceed 2x the tolerance",
        ),
        Option(
            "LIAISON_RELAY_TIMEOUT_S",
            "relay_timeout_s",
            decimal(0.01),
            "15",
            "one callback call, connect to last byte, ends by this",
        ),
        Option("LIAISON_RELAY_MAX_ATTEMPTS", "relay_max_attempts", integer(1), "8", "callback attempts in all"),
        # After the first try: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (±20 %).
        Option(
            "LIAISON_RELAY_SCHEDULE_S",
            "relay_schedule_s",
            DELAYS,
            "5,300,1800,7200,18000,36000,36000",
            "waits between relay attempts (+-20 %), Standard-Webhooks-like",
        ),
        Option(
            "LIAISON_RELAY_MAX_TOTAL_S",
            "relay_max_total_s",
            decimal(1.0),
            "172800",
            "no relay attempt starts later than this after the first",
        ),
    ),
    _section(
        "Outbound guard and bounded calls (issue 8)",
        Option(
            "LIAISON_OUTBOUND_ALLOW",
            "outbound_allow",
            ALLOW_LIST,
            "",
            "exceptions to the outbound guard for callback URLs (e.g. 127.0.0.1:5002); empty in production",
        ),
        Option(
            "LIAISON_PROVIDER_MAX_RESPONSE_BYTES",
            "provider_max_response_bytes",
            integer(1024),
            "1048576",
            "most of a provider's response body that is read (a job status with its outcome)",
        ),
        Option(
            "LIAISON_CALLBACK_MAX_RESPONSE_BYTES",
            "callback_max_response_bytes",
            integer(0),
            "4096",
            "most of a callback endpoint's response body that is read (only its status matters)",
        ),
    ),
    _section(
        "Workers and beat",
        Option(
            "LIAISON_QUEUE",
            "queue",
            TEXT,
            "liaison",
            "the Celery work queue (RabbitMQ: also <queue>.dlx / <queue>.dead)",
        ),
        # Longest wait handed to Celery as a countdown; longer waits are held in the database and
        # re-published by the outbox sweep, so no countdown comes near the Redis visibility_timeout.
        Option(
            "LIAISON_MAX_COUNTDOWN_S",
            "max_countdown_s",
            integer(1),
            "900",
            "longer retry waits are held in the database, not at the broker",
        ),
        Option(
            "LIAISON_MAX_DELIVERIES",
            "max_deliveries",
            integer(1),
            "5",
            "a message started this often without finishing is poison",
        ),
        Option(
            "LIAISON_ORPHAN_WINDOW_S",
            "orphan_window_s",
            integer(1),
            "3600",
            "an unbound orphan event opens an incident after this",
        ),
        # A reconcile run ends before beat's next one is due; what is left is the next run's oldest work.
        Option(
            "LIAISON_RECONCILE_MAX_RUN_S",
            "reconcile_max_run_s",
            integer(1),
            "240",
            "a reconcile run stops claiming work after this (beat runs it every 300 s)",
        ),
        Option("LIAISON_BEAT_BATCH", "beat_batch", integer(1), "500", "rows a beat job handles per transaction"),
    ),
    _section(
        "Isolation: bounded tasks, the relay queue, per-client relay concurrency (issue 8)",
        # Above the longest outbound call (a submit may make two: submit, then find). The soft limit
        # ends the attempt as a failed one; the hard one kills the pool process.
        Option(
            "LIAISON_TASK_SOFT_TIME_LIMIT_S",
            "task_soft_time_limit_s",
            integer(1),
            "120",
            "submit/relay/cancel: past it the attempt is a failed one (retried)",
        ),
        Option(
            "LIAISON_TASK_TIME_LIMIT_S",
            "task_time_limit_s",
            integer(1),
            "150",
            "...and past this the pool process is killed (must exceed the soft limit)",
        ),
        Option(
            "LIAISON_BEAT_SOFT_TIME_LIMIT_S",
            "beat_soft_time_limit_s",
            integer(1),
            "280",
            "beat jobs; must exceed LIAISON_RECONCILE_MAX_RUN_S",
        ),
        Option("LIAISON_BEAT_TIME_LIMIT_S", "beat_time_limit_s", integer(1), "300", "beat jobs' hard limit"),
        Option(
            "LIAISON_RELAY_QUEUE",
            "relay_queue",
            TEXT,
            "<LIAISON_QUEUE>.relay",
            "relays' own queue (Procfile: relay)",
            derive=lambda v: v["queue"] + ".relay",
        ),
        Option(
            "LIAISON_RELAY_CLIENT_CONCURRENCY",
            "relay_client_concurrency",
            integer(1),
            "2",
            "relay deliveries one client may have running at once, all workers together",
        ),
        Option(
            "LIAISON_RELAY_SLOT_WAIT_S",
            "relay_slot_wait_s",
            decimal(0.1),
            "2",
            "a relay finding its client's slots taken is re-queued after this",
        ),
    ),
    _section(
        "Outbox",
        Option(
            "LIAISON_OUTBOX_GRACE_S",
            "outbox_grace_s",
            integer(0),
            "10",
            "unpublished this long after commit: the sweep publishes it",
        ),
        Option(
            "LIAISON_OUTBOX_LEASE_S",
            "outbox_lease_s",
            integer(1),
            "1800",
            "published (or due) this long but not done: presumed lost",
        ),
    ),
    _section(
        'Limits and internal surfaces (issue 8; docs/architecture.md "Limits", docs/observability.md)',
        Option(
            "LIAISON_CLIENT_SUBMIT_RATE_PER_S",
            "client_submit_rate_per_s",
            decimal(0.001),
            "10",
            "POST /api/v1/tasks per client, sustained; over it 429 + Retry-After",
        ),
        Option(
            "LIAISON_CLIENT_SUBMIT_BURST",
            "client_submit_burst",
            integer(1),
            "20",
            "... and at once after a quiet spell",
        ),
        Option(
            "LIAISON_CLIENT_MAX_OPEN_TASKS",
            "client_max_open_tasks",
            integer(1),
            "10000",
            "non-final tasks per client; over it 429 (clients limits NAME overrides)",
        ),
        Option(
            "LIAISON_RATE_LIMIT_STORAGE",
            "rate_limit_storage",
            choice("auto", "redis", "database"),
            "auto",
            "where shared rate limits live; auto = redis when the broker is Redis, else database",
        ),
        Option(
            "LIAISON_RATE_LIMIT_REDIS_URL",
            "rate_limit_redis_url",
            TEXT,
            "",
            "default: the broker URL when it is Redis",
            secret=True,
        ),
        Option(
            "LIAISON_PROVIDER_RATE_MAX_WAIT_S",
            "provider_rate_max_wait_s",
            decimal(0.0),
            "2",
            "a worker sleeps up to this for a provider slot; later ones retry via the broker",
        ),
        Option(
            "LIAISON_METRICS_TOKEN",
            "metrics_token",
            token(MIN_METRICS_TOKEN_CHARS),
            "",
            "bearer token for /metrics and /readyz; unset = both 404",
            secret=True,
        ),
        Option(
            "LIAISON_METRICS_CACHE_S",
            "metrics_cache_s",
            decimal(0.0),
            "5",
            "business gauges are read from the database at most this often (per process)",
        ),
    ),
    _section(
        "Start-up (issue 9)",
        # A service restarting alongside us gets this long; a wrong host fails after it, not never.
        Option(
            "LIAISON_STARTUP_WAIT_S",
            "startup_wait_s",
            decimal(0.0),
            "10",
            "web, worker and beat wait up to this for the database and broker, then exit with one line",
        ),
    ),
    _section(
        "Logs",
        Option(
            "LIAISON_LOG_LEVEL",
            "log_level",
            choice("debug", "info", "warning", "error", upper=True),
            "info",
            "debug, info, warning or error",
        ),
        Option(
            "LIAISON_LOG_FORMAT",
            "log_format",
            choice("console", "json"),
            "console",
            "json in production: one JSON object per line",
        ),
    ),
)

_S = "LIAISON_PROVIDER_<NAME>_"
PROVIDER_SECTION = _section(
    "One provider: LIAISON_PROVIDER_<NAME>_* for each name in LIAISON_PROVIDERS (the demo's is SIMULATOR)",
    Option(_S + "KIND", "kind", choice("rest"), "rest", "adapter: the built-in generic REST provider"),
    Option(
        _S + "BASE_URL",
        "base_url",
        HTTP_URL,
        "",
        "where the vendor's API is (required)",
        example="http://127.0.0.1:5001",
        required=True,
    ),
    Option(
        _S + "WEBHOOK_SECRETS",
        "webhook_secrets",
        WEBHOOK_SECRETS,
        "",
        "secrets its webhooks are signed with; several while rotating (required)",
        secret=True,
        example="whsec_...,whsec_...",
        required=True,
    ),
    Option(_S + "API_KEY", "api_key", TEXT, "", "sent as Authorization: Bearer, if set", secret=True),
    Option(_S + "CONNECT_TIMEOUT_S", "connect_timeout_s", decimal(0.01), "3.05", "TCP connect to the vendor"),
    Option(_S + "READ_TIMEOUT_S", "read_timeout_s", decimal(0.01), "10", "between bytes of the vendor's answer"),
    Option(
        _S + "ACCEPTANCE_TIMEOUT_S",
        "acceptance_timeout_s",
        optional_int(),
        "",
        "default deadline for its tasks to reach accepted",
    ),
    Option(
        _S + "EXECUTION_TIMEOUT_S",
        "execution_timeout_s",
        optional_int(),
        "",
        "default deadline for its tasks to reach a final state",
    ),
    Option(_S + "SUBMIT_MAX_ATTEMPTS", "submit_max_attempts", integer(1), "6", "submit/cancel attempts in all"),
    Option(_S + "SUBMIT_BACKOFF_BASE_S", "submit_backoff_base_s", decimal(0.0), "2", "first retry wait, doubling"),
    Option(_S + "SUBMIT_BACKOFF_CAP_S", "submit_backoff_cap_s", decimal(0.0), "300", "longest retry wait"),
    Option(
        _S + "SUBMIT_MAX_TOTAL_S",
        "submit_max_total_s",
        decimal(1.0),
        "86400",
        "no submit/cancel retry starts later than this after the first try",
    ),
    Option(
        _S + "RECONCILE_AFTER_S",
        "reconcile_after_s",
        integer(1),
        "900",
        "a task quiet this long at the vendor is asked about",
    ),
    Option(
        _S + "RATE_LIMIT_PER_S",
        "rate_limit_per_s",
        decimal(0.01),
        "10",
        "calls per second (submit, cancel, status, find), all processes together",
    ),
    Option(_S + "RATE_LIMIT_BURST", "rate_limit_burst", integer(1), "1", "calls at once after a quiet spell"),
    Option(
        _S + "CALL_DEADLINE_S",
        "call_deadline_s",
        decimal(0.01),
        "30",
        "one call, connect to last body byte, ends by this",
    ),
)

OPTIONS: tuple[Option, ...] = tuple(o for s in SECTIONS for o in s.options)
PROVIDER_OPTIONS: tuple[Option, ...] = PROVIDER_SECTION.options


def _by_attr(options: tuple[Option, ...]) -> dict[str, Option]:
    return {o.attr: o for o in options}


def _provider_default(attr: str) -> Any:
    option = _by_attr(PROVIDER_OPTIONS)[attr]
    return option.parser.convert(option.env, option.default)


def read_options(env: Mapping[str, str], options: tuple[Option, ...], what: str = "") -> dict[str, Any]:
    """Every option's value by attribute, in table order (a derived default sees earlier values)."""
    values: dict[str, Any] = {}
    for option in options:
        values[option.attr] = option.read(env, values, what)
    return values


def database_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """All a migration needs: read no other setting, so a provider's missing secret cannot stop it."""
    wanted = _by_attr(OPTIONS)
    return read_options(os.environ if env is None else env, (wanted["var_dir"], wanted["database_url"]))["database_url"]


def _masked_repr(self: Any) -> str:
    """A repr that shows no credential: secret options are left out, passwords in URLs masked."""
    shown = []
    for f in fields(self):
        if f.name not in self._secret:
            value = getattr(self, f.name)
            shown.append(f"{f.name}={mask_url_password(value)!r}" if isinstance(value, str) else f"{f.name}={value!r}")
    return f"{type(self).__name__}({', '.join(shown)})"


def _secret_attrs(options: tuple[Option, ...]) -> frozenset[str]:
    return frozenset(o.attr for o in options if o.secret)


@dataclass(frozen=True, repr=False)
class ProviderSettings:
    """One external system, named in configuration (``LIAISON_PROVIDER_<NAME>_*``); the meaning
    and default of each field are in ``PROVIDER_OPTIONS``."""

    __repr__ = _masked_repr
    _secret: ClassVar[frozenset[str]] = _secret_attrs(PROVIDER_OPTIONS)

    name: str
    kind: str
    base_url: str
    webhook_secrets: tuple[str, ...]
    connect_timeout_s: float = _provider_default("connect_timeout_s")
    read_timeout_s: float = _provider_default("read_timeout_s")
    api_key: str = _provider_default("api_key")
    acceptance_timeout_s: int | None = _provider_default("acceptance_timeout_s")
    execution_timeout_s: int | None = _provider_default("execution_timeout_s")
    submit_max_attempts: int = _provider_default("submit_max_attempts")
    submit_backoff_base_s: float = _provider_default("submit_backoff_base_s")
    submit_backoff_cap_s: float = _provider_default("submit_backoff_cap_s")
    submit_max_total_s: float = _provider_default("submit_max_total_s")
    reconcile_after_s: int = _provider_default("reconcile_after_s")
    rate_limit_per_s: float = _provider_default("rate_limit_per_s")
    rate_limit_burst: int = _provider_default("rate_limit_burst")
    call_deadline_s: float = _provider_default("call_deadline_s")

    @staticmethod
    def options_for(name: str) -> tuple[Option, ...]:
        """PROVIDER_OPTIONS with this provider's variable names."""
        prefix = f"LIAISON_PROVIDER_{name.upper()}_"
        return tuple(replace(o, env=o.env.replace(_S, prefix)) for o in PROVIDER_OPTIONS)

    @classmethod
    def from_env(cls, env: Mapping[str, str], name: str) -> ProviderSettings:
        return cls(name=name, **read_options(env, cls.options_for(name), f" for provider {name!r}"))


@dataclass(frozen=True, repr=False)
class Settings:
    """Web, worker and beat's configuration; each field's variable, default and meaning are its
    row in ``OPTIONS`` (``providers`` comes from ``LIAISON_PROVIDERS`` and ``PROVIDER_OPTIONS``)."""

    __repr__ = _masked_repr  # no credential in a repr: secrets left out, URL passwords masked
    _secret: ClassVar[frozenset[str]] = _secret_attrs(OPTIONS)

    database_url: str
    broker_url: str
    broker_folder: Path
    public_url: str
    admin_token: str
    providers: Mapping[str, ProviderSettings]
    default_provider: str | None
    max_body_bytes: int
    webhook_tolerance_s: int
    processed_retention_s: int
    outbox_grace_s: int
    outbox_lease_s: int
    relay_timeout_s: float
    relay_max_attempts: int
    relay_schedule_s: tuple[float, ...]
    relay_max_total_s: float
    queue: str
    max_countdown_s: int
    max_deliveries: int
    orphan_window_s: int
    beat_batch: int
    reconcile_max_run_s: int
    log_format: str
    log_level: str
    max_json_depth: int
    max_input_bytes: int
    max_outcome_bytes: int
    outbound_allow: AllowList
    provider_max_response_bytes: int
    callback_max_response_bytes: int
    client_submit_rate_per_s: float
    client_submit_burst: int
    client_max_open_tasks: int
    rate_limit_storage: str  # "redis" or "database" once read ("auto" is resolved)
    rate_limit_redis_url: str
    provider_rate_max_wait_s: float
    metrics_token: str
    metrics_cache_s: float
    task_soft_time_limit_s: int
    task_time_limit_s: int
    beat_soft_time_limit_s: int
    beat_time_limit_s: int
    relay_queue: str
    relay_client_concurrency: int
    relay_slot_wait_s: float
    startup_wait_s: float

    @property
    def input_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_input_bytes)

    @property
    def outcome_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_outcome_bytes)

    @property
    def relay_slot_ttl_s(self) -> float:
        """A relay slot's lease outlives the relay's hard time limit, so the slot of a worker that
        died mid-delivery frees itself."""
        return self.task_time_limit_s + 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values = read_options(env, OPTIONS)
        del values["var_dir"]  # only ever a default for others
        names = values.pop("provider_names")
        values["providers"] = {name: ProviderSettings.from_env(env, name) for name in names}
        values["default_provider"] = values["default_provider"] or None
        values.update(_rate_limit_storage(values))
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Cross-setting rules, checked at start-up."""
        if self.default_provider is not None and self.default_provider not in self.providers:
            raise ConfigError("LIAISON_DEFAULT_PROVIDER must name one of LIAISON_PROVIDERS")
        if self.processed_retention_s <= 2 * self.webhook_tolerance_s:
            # A redelivered message older than the retention must be refused by its timestamp,
            # or it would be processed a second time once its ProcessedMessage row is pruned.
            raise ConfigError("LIAISON_PROCESSED_RETENTION_S must exceed twice LIAISON_WEBHOOK_TOLERANCE_S")
        if self.max_countdown_s >= VISIBILITY_TIMEOUT_S:
            # Redis would redeliver a message still waiting for its countdown: a duplicate run.
            raise ConfigError("LIAISON_MAX_COUNTDOWN_S must be below the broker visibility_timeout")
        if self.max_json_depth > MAX_DEPTH_CEILING - 2:
            # json.loads/dumps and the database drivers recurse per level: stay far from the stack's end.
            raise ConfigError(f"LIAISON_MAX_JSON_DEPTH must be at most {MAX_DEPTH_CEILING - 2}")
        if self.task_time_limit_s <= self.task_soft_time_limit_s:
            # The soft limit must leave the task time to record the failed attempt before the kill.
            raise ConfigError("LIAISON_TASK_TIME_LIMIT_S must exceed LIAISON_TASK_SOFT_TIME_LIMIT_S")
        if self.beat_time_limit_s <= self.beat_soft_time_limit_s:
            raise ConfigError("LIAISON_BEAT_TIME_LIMIT_S must exceed LIAISON_BEAT_SOFT_TIME_LIMIT_S")
        if self.beat_soft_time_limit_s <= self.reconcile_max_run_s:
            # A reconcile run must end by its own budget, not be cut off by the time limit.
            raise ConfigError("LIAISON_BEAT_SOFT_TIME_LIMIT_S must exceed LIAISON_RECONCILE_MAX_RUN_S")
        if self.relay_queue == self.queue:
            raise ConfigError("LIAISON_RELAY_QUEUE must differ from LIAISON_QUEUE (relays run apart from submissions)")
        if self.broker_url.startswith("memory://"):
            raise ConfigError("CELERY_BROKER_URL memory:// is per process; use filesystem:// locally")


def _rate_limit_storage(values: Mapping[str, Any]) -> dict[str, str]:
    """Resolve ``auto`` (redis when a Redis URL is at hand) and default the Redis URL to the broker's."""
    storage, redis_url, broker = values["rate_limit_storage"], values["rate_limit_redis_url"], values["broker_url"]
    if storage == "auto":
        storage = "redis" if (redis_url or broker.startswith(_REDIS_SCHEMES)) else "database"
    if storage == "database":
        return {"rate_limit_storage": storage, "rate_limit_redis_url": ""}
    redis_url = redis_url or (broker if broker.startswith(_REDIS_SCHEMES) else "")
    if not redis_url.startswith(_REDIS_SCHEMES):
        raise ConfigError("LIAISON_RATE_LIMIT_REDIS_URL must be a redis:// URL when the broker is not Redis")
    return {"rate_limit_storage": storage, "rate_limit_redis_url": redis_url}
