"""One frozen settings object, read from the environment once and shared by web, worker and beat.

Every setting is declared here with its type and default; a bad value fails at start-up with a
message that names the variable (never at the first request that needs it). ``.env.example``
documents the same names.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from webhooks.bounded_json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING, JsonLimits
from webhooks.signing import DEFAULT_TOLERANCE_S, decode_secret
from core.outbound_guard import AllowList

# --- credentials (issue 8) ---
#: The admin token is a bearer credential for every operator action: no shorter than this.
MIN_ADMIN_TOKEN_LEN = 32


def _admin_token(env: Mapping[str, str]) -> str:
    """Empty = the admin API is off; otherwise at least MIN_ADMIN_TOKEN_LEN characters."""
    token = env.get("LIAISON_ADMIN_TOKEN", "").strip()
    if token and len(token) < MIN_ADMIN_TOKEN_LEN:
        raise ConfigError(
            f"LIAISON_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_LEN} characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'), or empty to turn the admin API off"
        )
    return token


#: Redis redelivers a message not acked within this; celeryconfig uses the same number.
VISIBILITY_TIMEOUT_S = 12 * 3600


#: ``scheme://user:password@`` and ``scheme://:password@`` (Redis): the password part of a URL.
_URL_PASSWORD = re.compile(r"(?<=://)([^:/@\s]*):([^@/\s]+)@")


def mask_url_password(url: str) -> str:
    """``redis://:***@host``: a URL fit to show, with any password masked (the user name stays)."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


def _masked_repr(self: object) -> str:
    """A dataclass repr that shows no credential: fields declared ``repr=False`` (keys, secrets,
    tokens) are left out and passwords inside URLs are masked."""
    shown = []
    for f in fields(self):  # type: ignore[arg-type]
        if f.repr:
            value = getattr(self, f.name)
            shown.append(f"{f.name}={mask_url_password(value)!r}" if isinstance(value, str) else f"{f.name}={value!r}")
    return f"{type(self).__name__}({', '.join(shown)})"


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable, never its value."""


def _str(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default


def _number(env: Mapping[str, str], name: str, default: float, minimum: float, cast=float):
    raw = env.get(name, "").strip()
    if not raw:
        return cast(default)
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number") from None
    if not math.isfinite(value):  # "nan" would pass every comparison: a limit that never bites
        raise ConfigError(f"{name} must be a finite number")
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}")
    return value


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    return _number(env, name, default, minimum, int)


def _float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    return _number(env, name, default, minimum, float)


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _str(env, name, default).lower()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}")
    return value


def _url(env: Mapping[str, str], name: str, default: str) -> str:
    value = _str(env, name, default)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name} must be an http(s) URL")
    return value.rstrip("/")


def _delays(env: Mapping[str, str], name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        values = tuple(float(v) for v in raw.split(","))
    except ValueError:
        raise ConfigError(f"{name} must be comma-separated seconds") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ConfigError(f"{name} must be finite and not negative")
    return values


def _secrets(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    values = tuple(s.strip() for s in env.get(name, "").split(",") if s.strip())
    for value in values:
        try:
            decode_secret(value)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return values


def _allow_list(env: Mapping[str, str], name: str) -> AllowList:
    try:
        return AllowList.parse(env.get(name, ""))
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


MIN_METRICS_TOKEN_CHARS = 32
_REDIS_SCHEMES = ("redis://", "rediss://")


def _limits(env: Mapping[str, str]) -> dict[str, object]:
    """Issue 8's limits and internal surfaces, in one block (see docs/architecture.md, "Limits")."""
    broker = _str(env, "CELERY_BROKER_URL", "filesystem://localhost//")
    storage = _choice(env, "LIAISON_RATE_LIMIT_STORAGE", "auto", ("auto", "redis", "database"))
    redis_url = env.get("LIAISON_RATE_LIMIT_REDIS_URL", "").strip()
    if storage == "auto":
        storage = "redis" if (redis_url or broker.startswith(_REDIS_SCHEMES)) else "database"
    if storage == "redis":
        redis_url = redis_url or (broker if broker.startswith(_REDIS_SCHEMES) else "")
        if not redis_url.startswith(_REDIS_SCHEMES):
            raise ConfigError("LIAISON_RATE_LIMIT_REDIS_URL must be a redis:// URL when the broker is not Redis")
    else:
        redis_url = ""
    token = env.get("LIAISON_METRICS_TOKEN", "").strip()
    if token and len(token) < MIN_METRICS_TOKEN_CHARS:
        raise ConfigError(f"LIAISON_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN_CHARS} characters")
    return {
        "client_submit_rate_per_s": _float(env, "LIAISON_CLIENT_SUBMIT_RATE_PER_S", 10.0, 0.001),
        "client_submit_burst": _int(env, "LIAISON_CLIENT_SUBMIT_BURST", 20, 1),
        "client_max_open_tasks": _int(env, "LIAISON_CLIENT_MAX_OPEN_TASKS", 10_000, 1),
        "rate_limit_storage": storage,
        "rate_limit_redis_url": redis_url,
        "provider_rate_max_wait_s": _float(env, "LIAISON_PROVIDER_RATE_MAX_WAIT_S", 2.0, 0.0),
        "metrics_token": token,
        "metrics_cache_s": _float(env, "LIAISON_METRICS_CACHE_S", 5.0, 0.0),
    }


@dataclass(frozen=True, repr=False)
class ProviderSettings:
    """One external system, named in configuration (``LIAISON_PROVIDER_<NAME>_*``)."""

    __repr__ = _masked_repr

    name: str
    kind: str  # which adapter class speaks to it; "rest" is the built-in generic REST provider
    base_url: str
    webhook_secrets: tuple[str, ...] = field(repr=False)
    connect_timeout_s: float = 3.05
    read_timeout_s: float = 10.0
    api_key: str = field(default="", repr=False)
    acceptance_timeout_s: int | None = None  # default deadline to reach `accepted`
    execution_timeout_s: int | None = None  # default deadline to reach a final state
    submit_max_attempts: int = 6
    submit_backoff_base_s: float = 2.0
    submit_backoff_cap_s: float = 300.0
    submit_max_total_s: float = 24 * 3600.0  # no attempt starts later than this after the first
    reconcile_after_s: int = 900  # a task quiet this long at the vendor is asked about
    # Calls per second to this provider -- submit, cancel, status and find, from every worker and
    # beat process together (issue 8); ``rate_limit_burst`` of them may go at once after a quiet spell.
    rate_limit_per_s: float = 10.0
    rate_limit_burst: int = 1
    # Outbound guard and bounded calls (issue 8): one call, connect to last body byte, ends by this.
    call_deadline_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str], name: str) -> ProviderSettings:
        prefix = f"LIAISON_PROVIDER_{name.upper()}_"
        kind = _choice(env, prefix + "KIND", "rest", ("rest",))
        if not env.get(prefix + "BASE_URL", "").strip():
            raise ConfigError(f"{prefix}BASE_URL is required for provider {name!r}")
        secrets = _secrets(env, prefix + "WEBHOOK_SECRETS")
        if not secrets:
            raise ConfigError(f"{prefix}WEBHOOK_SECRETS is required for provider {name!r}")
        acceptance = _int(env, prefix + "ACCEPTANCE_TIMEOUT_S", 0, 0)
        execution = _int(env, prefix + "EXECUTION_TIMEOUT_S", 0, 0)
        return cls(
            name=name,
            kind=kind,
            base_url=_url(env, prefix + "BASE_URL", ""),
            webhook_secrets=secrets,
            connect_timeout_s=_float(env, prefix + "CONNECT_TIMEOUT_S", 3.05, 0.01),
            read_timeout_s=_float(env, prefix + "READ_TIMEOUT_S", 10.0, 0.01),
            api_key=env.get(prefix + "API_KEY", "").strip(),
            acceptance_timeout_s=acceptance or None,
            execution_timeout_s=execution or None,
            submit_max_attempts=_int(env, prefix + "SUBMIT_MAX_ATTEMPTS", 6, 1),
            submit_backoff_base_s=_float(env, prefix + "SUBMIT_BACKOFF_BASE_S", 2.0, 0.0),
            submit_backoff_cap_s=_float(env, prefix + "SUBMIT_BACKOFF_CAP_S", 300.0, 0.0),
            submit_max_total_s=_float(env, prefix + "SUBMIT_MAX_TOTAL_S", 24 * 3600.0, 1.0),
            reconcile_after_s=_int(env, prefix + "RECONCILE_AFTER_S", 900, 1),
            rate_limit_per_s=_float(env, prefix + "RATE_LIMIT_PER_S", 10.0, 0.01),
            call_deadline_s=_float(env, prefix + "CALL_DEADLINE_S", 30.0, 0.01),
            rate_limit_burst=_int(env, prefix + "RATE_LIMIT_BURST", 1, 1),
        )


@dataclass(frozen=True, repr=False)
class Settings:
    __repr__ = _masked_repr  # no credential in a repr: secrets left out, URL passwords masked
    database_url: str
    broker_url: str
    broker_folder: Path  # only used by the embedded filesystem:// broker
    public_url: str  # where external systems reach our /webhooks/<provider>
    admin_token: str = field(repr=False)
    providers: Mapping[str, ProviderSettings]
    default_provider: str | None
    max_body_bytes: int = 256 * 1024
    webhook_tolerance_s: int = DEFAULT_TOLERANCE_S
    processed_retention_s: int = 96 * 3600
    outbox_grace_s: int = 10  # a row unpublished this long after commit is the sweep's
    outbox_lease_s: int = 1800  # a published row not done this long is presumed lost
    relay_timeout_s: float = 15.0
    relay_max_attempts: int = 8
    # Standard-Webhooks-like: after the first try, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (±20 %).
    relay_schedule_s: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    relay_max_total_s: float = 2 * 24 * 3600.0  # no relay attempt starts later than this after the first
    queue: str = "liaison"  # the Celery work queue (RabbitMQ: also "<queue>.dlx" / "<queue>.dead")
    # Longest wait handed to Celery as a countdown; longer waits are held in the database and
    # re-published by the outbox sweep, so no countdown comes near the Redis visibility_timeout.
    max_countdown_s: int = 900
    max_deliveries: int = 5  # a message started this often without finishing is poison
    orphan_window_s: int = 3600  # an orphan event still unbound after this opens an incident
    beat_batch: int = 500  # rows one beat job handles per transaction
    # A reconcile run stops claiming work after this, so it ends before beat's next one (every 300 s)
    # is due; what is left is the oldest work of the next run.
    reconcile_max_run_s: int = 240
    log_format: str = "console"
    log_level: str = "INFO"
    # --- Bounded input (issue 8): a task's input and a vendor's outcome, checked on the text before
    # parsing (depth) and as canonical JSON (size); past either, a 4xx, a refused status snapshot or
    # a dead letter, never a RecursionError.
    max_json_depth: int = DEFAULT_MAX_DEPTH
    max_input_bytes: int = DEFAULT_MAX_BYTES
    max_outcome_bytes: int = DEFAULT_MAX_BYTES

    # --- Outbound guard and bounded calls (issue 8) ---
    # Exceptions to the outbound guard for client-supplied (callback) URLs: host, host:port or CIDR
    # entries that may be private. Empty in production; tests and the demo list their loopback server.
    outbound_allow: AllowList = field(default_factory=AllowList)
    # The most of a response body read from a provider (a job status with its outcome) …
    provider_max_response_bytes: int = 1024 * 1024
    # … and from a callback endpoint (only its status matters; the rest is not read).
    callback_max_response_bytes: int = 4096

    @property
    def input_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_input_bytes)

    @property
    def outcome_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_outcome_bytes)

    # --- Limits and internal surfaces (issue 8, points 6 and 7) ---------------------------------
    client_submit_rate_per_s: float = 10.0  # POST /api/v1/tasks per client, sustained (per-client override)
    client_submit_burst: int = 20  # ... and at once after a quiet spell
    client_max_open_tasks: int = 10_000  # non-final tasks per client (per-client override)
    #: where shared rate-limit state lives: "redis" or "database" ("auto": redis when the broker is)
    rate_limit_storage: str = "database"
    rate_limit_redis_url: str = field(default="", repr=False)  # may carry a password
    #: a worker sleeps up to this for a provider call's slot; a later slot is retried via the broker
    provider_rate_max_wait_s: float = 2.0
    #: bearer token for /metrics and /readyz; unset = both answer 404 (off)
    metrics_token: str = field(default="", repr=False)
    metrics_cache_s: float = 5.0  # business gauges are read from the database at most this often per process

    # --- Isolation: bounded tasks, the relay queue, per-client relay concurrency (issue 8) ---
    # Soft/hard time limits of liaison.submit, .relay and .cancel: above the longest outbound call
    # (a submit may make two: submit, then find). The soft limit ends the attempt as a failed one.
    task_soft_time_limit_s: int = 120
    task_time_limit_s: int = 150
    # Beat jobs: above their run budget (reconcile stops claiming after reconcile_max_run_s).
    beat_soft_time_limit_s: int = 280
    beat_time_limit_s: int = 300
    relay_queue: str = "liaison.relay"  # relays' own queue (default "<queue>.relay")
    relay_client_concurrency: int = 2  # relay deliveries one client may have running at once
    relay_slot_wait_s: float = 2.0  # a relay that finds no free slot for its client waits this long

    @property
    def relay_slot_ttl_s(self) -> float:
        """A relay slot's lease outlives the relay's hard time limit, so the slot of a worker that
        died mid-delivery frees itself."""
        return self.task_time_limit_s + 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        var_dir = Path(_str(env, "LIAISON_VAR_DIR", "var")).resolve()
        names = [n.strip().lower() for n in env.get("LIAISON_PROVIDERS", "").split(",") if n.strip()]
        for name in names:
            if not name.isidentifier():
                raise ConfigError("LIAISON_PROVIDERS must be comma-separated simple names")
        providers = {name: ProviderSettings.from_env(env, name) for name in names}
        default_provider = _str(env, "LIAISON_DEFAULT_PROVIDER", names[0] if len(names) == 1 else "")
        if default_provider and default_provider not in providers:
            raise ConfigError("LIAISON_DEFAULT_PROVIDER must name one of LIAISON_PROVIDERS")
        settings = cls(
            database_url=_str(env, "DATABASE_URL", f"sqlite:///{var_dir / 'liaison.db'}"),
            broker_url=_str(env, "CELERY_BROKER_URL", "filesystem://localhost//"),
            broker_folder=Path(_str(env, "LIAISON_BROKER_FOLDER", str(var_dir / "broker"))),
            public_url=_url(env, "LIAISON_PUBLIC_URL", "http://127.0.0.1:5000"),
            admin_token=_admin_token(env),
            providers=providers,
            default_provider=default_provider or None,
            max_body_bytes=_int(env, "LIAISON_MAX_BODY_BYTES", 256 * 1024, 1024),
            webhook_tolerance_s=_int(env, "LIAISON_WEBHOOK_TOLERANCE_S", DEFAULT_TOLERANCE_S, 1),
            processed_retention_s=_int(env, "LIAISON_PROCESSED_RETENTION_S", 96 * 3600, 1),
            outbox_grace_s=_int(env, "LIAISON_OUTBOX_GRACE_S", 10, 0),
            outbox_lease_s=_int(env, "LIAISON_OUTBOX_LEASE_S", 1800, 1),
            relay_timeout_s=_float(env, "LIAISON_RELAY_TIMEOUT_S", 15.0, 0.01),
            relay_max_attempts=_int(env, "LIAISON_RELAY_MAX_ATTEMPTS", 8, 1),
            relay_schedule_s=_delays(env, "LIAISON_RELAY_SCHEDULE_S", (5, 300, 1800, 7200, 18000, 36000, 36000)),
            relay_max_total_s=_float(env, "LIAISON_RELAY_MAX_TOTAL_S", 2 * 24 * 3600.0, 1.0),
            queue=_str(env, "LIAISON_QUEUE", "liaison"),
            max_countdown_s=_int(env, "LIAISON_MAX_COUNTDOWN_S", 900, 1),
            max_deliveries=_int(env, "LIAISON_MAX_DELIVERIES", 5, 1),
            orphan_window_s=_int(env, "LIAISON_ORPHAN_WINDOW_S", 3600, 1),
            beat_batch=_int(env, "LIAISON_BEAT_BATCH", 500, 1),
            reconcile_max_run_s=_int(env, "LIAISON_RECONCILE_MAX_RUN_S", 240, 1),
            log_format=_choice(env, "LIAISON_LOG_FORMAT", "console", ("console", "json")),
            log_level=_choice(env, "LIAISON_LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper(),
            # --- Bounded input (issue 8) ---
            max_json_depth=_int(env, "LIAISON_MAX_JSON_DEPTH", DEFAULT_MAX_DEPTH, 1),
            max_input_bytes=_int(env, "LIAISON_MAX_INPUT_BYTES", DEFAULT_MAX_BYTES, 16),
            max_outcome_bytes=_int(env, "LIAISON_MAX_OUTCOME_BYTES", DEFAULT_MAX_BYTES, 16),
            # --- Outbound guard and bounded calls (issue 8) ---
            outbound_allow=_allow_list(env, "LIAISON_OUTBOUND_ALLOW"),
            provider_max_response_bytes=_int(env, "LIAISON_PROVIDER_MAX_RESPONSE_BYTES", 1024 * 1024, 1024),
            callback_max_response_bytes=_int(env, "LIAISON_CALLBACK_MAX_RESPONSE_BYTES", 4096, 0),
            # --- Limits and internal surfaces (issue 8) ---
            **_limits(env),
            # --- Isolation: bounded tasks, the relay queue, per-client relay concurrency (issue 8) ---
            task_soft_time_limit_s=_int(env, "LIAISON_TASK_SOFT_TIME_LIMIT_S", 120, 1),
            task_time_limit_s=_int(env, "LIAISON_TASK_TIME_LIMIT_S", 150, 1),
            beat_soft_time_limit_s=_int(env, "LIAISON_BEAT_SOFT_TIME_LIMIT_S", 280, 1),
            beat_time_limit_s=_int(env, "LIAISON_BEAT_TIME_LIMIT_S", 300, 1),
            relay_queue=_str(env, "LIAISON_RELAY_QUEUE", _str(env, "LIAISON_QUEUE", "liaison") + ".relay"),
            relay_client_concurrency=_int(env, "LIAISON_RELAY_CLIENT_CONCURRENCY", 2, 1),
            relay_slot_wait_s=_float(env, "LIAISON_RELAY_SLOT_WAIT_S", 2.0, 0.1),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        """Cross-setting rules, checked at start-up."""
        if self.processed_retention_s <= 2 * self.webhook_tolerance_s:
            # A redelivered message older than the retention must be refused by its timestamp,
            # or it would be processed a second time once its ProcessedMessage row is pruned.
            raise ConfigError(
                "LIAISON_PROCESSED_RETENTION_S must exceed twice LIAISON_WEBHOOK_TOLERANCE_S"
            )
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
