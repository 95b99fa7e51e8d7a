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

from webhooks.signing import DEFAULT_TOLERANCE_S, decode_secret

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
    rate_limit_per_s: float = 10.0  # calls per second reconciliation may make

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
            admin_token=env.get("LIAISON_ADMIN_TOKEN", "").strip(),
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
