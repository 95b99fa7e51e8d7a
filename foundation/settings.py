"""One frozen settings object, read from the environment once and shared by web, worker and beat.

Every setting is declared once, as data: a row of ``OPTIONS`` (``foundation.setting_table``; or of
``PROVIDER_OPTIONS`` in ``foundation.provider_setting_table`` for the ``LIAISON_PROVIDER_<NAME>_*``
block, read by ``foundation.provider_settings``) holds its variable, attribute, parser, default and
doc. ``Settings.from_env`` is derived from those rows, and so are ``.env.example`` and
docs/settings.md (``python -m app.settings_docs``; a unit test keeps both files equal to what it
prints). A bad value fails at start-up with a message that names the variable, never its value.
Rules that tie several settings together live in ``Settings.validate``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from core.endpoint_health import HealthPolicy
from core.fair_share import DispatchPolicy
from core.outbound_guard import AllowList
from core.queue_types import is_sentinel_url
from foundation.database_urls import require_sqlite_folder
from foundation.option_reading import by_attr, masked_repr, read_options, secret_attrs
from foundation.options import ConfigError

# Kept importable here: the docs' test reads both tables off this module (``settings.PROVIDER_OPTIONS``).
from foundation.provider_setting_table import PROVIDER_OPTIONS as PROVIDER_OPTIONS
from foundation.provider_settings import ProviderSettings
from foundation.setting_table import OPTIONS
from wire.bounded_json import MAX_DEPTH_CEILING, JsonLimits

#: Redis redelivers a message not acked within this; celeryconfig uses the same number.
VISIBILITY_TIMEOUT_S = 12 * 3600
_REDIS_SCHEMES = ("redis://", "rediss://")


def database_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """All a migration needs: read no other setting, so a provider's missing secret cannot stop it."""
    env = os.environ if env is None else env
    wanted = by_attr(OPTIONS)
    return _checked_database_url(env, read_options(env, (wanted["var_dir"], wanted["database_url"]))["database_url"])


def database_pooler_from_env(env: Mapping[str, str] | None = None) -> str:
    """``LIAISON_DATABASE_POOLER`` alone, for a migration (which must not prepare statements behind
    PgBouncer either)."""
    env = os.environ if env is None else env
    return str(read_options(env, (by_attr(OPTIONS)["database_pooler"],))["database_pooler"])


def _checked_database_url(env: Mapping[str, str], url: str) -> str:
    """A ``DATABASE_URL`` the environment sets must name a SQLite folder that exists; the default
    file lives in ``LIAISON_VAR_DIR``, Liaison's own folder, which is made when missing."""
    if env.get("DATABASE_URL", "").strip():
        require_sqlite_folder("DATABASE_URL", url)
    return url


@dataclass(frozen=True, repr=False)
class Settings:
    """Web, worker and beat's configuration; each field's variable, default and meaning are its
    row in ``OPTIONS`` (``providers`` comes from ``LIAISON_PROVIDERS`` and ``PROVIDER_OPTIONS``)."""

    __repr__ = masked_repr  # no credential in a repr: secrets left out, URL passwords masked
    _secret: ClassVar[frozenset[str]] = secret_attrs(OPTIONS)

    database_url: str
    database_pooler: str  # "none" or "pgbouncer-transaction" (models.db.POOLERS)
    broker_url: str
    broker_folder: Path
    rabbitmq_queue_type: str  # classic | quorum (core.queue_types)
    redis_sentinel_master: str
    public_url: str
    admin_token: str
    providers: Mapping[str, ProviderSettings]
    default_provider: str | None
    max_body_bytes: int
    header_read_timeout_s: float
    body_read_timeout_s: float
    webhook_tolerance_s: int
    processed_retention_s: int
    retention_tasks_s: int
    retention_outbox_s: int
    retention_dead_letters_s: int
    retention_incidents_s: int
    retention_orphans_s: int
    retention_export_dir: str
    outbox_grace_s: int
    outbox_lease_s: int
    start_lease_margin_s: float
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
    worker_metrics_port: int | None
    worker_metrics_address: str
    task_soft_time_limit_s: int
    task_time_limit_s: int
    beat_soft_time_limit_s: int
    beat_time_limit_s: int
    relay_queue: str
    calls_queue: str
    call_threads: int
    dispatch_window: int
    priority_aging_s: float
    relay_threads: int
    relay_client_concurrency: int
    relay_endpoint_concurrency: int
    relay_slot_wait_s: float
    endpoint_failures_to_pause: int
    endpoint_pause_s: float
    endpoint_pause_cap_s: float
    startup_wait_s: float
    notify_email_kinds: frozenset[str] | None
    notify_chat_kinds: frozenset[str] | None
    smtp_host: str
    smtp_port: int
    smtp_security: str
    smtp_username: str
    smtp_password: str
    notify_email_from: str
    notify_email_to: tuple[str, ...]
    notify_chat_url: str
    notify_timeout_s: float
    notify_max_attempts: int
    notify_backoff_base_s: float
    notify_backoff_cap_s: float
    notify_digest_threshold: int
    notify_digest_window_s: float
    channel_amqp_url: str
    channel_redis_url: str
    channel_prefix: str
    channel_events_maxlen: int
    channel_claim_idle_s: float
    channel_timeout_s: float
    console_session_s: int
    flower_url: str
    otlp_endpoint: str
    otel_service_name: str
    otel_traces_sampler: str
    otel_traces_sampler_arg: float

    @property
    def input_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_input_bytes)

    @property
    def outcome_limits(self) -> JsonLimits:
        return JsonLimits(self.max_json_depth, self.max_outcome_bytes)

    @property
    def relay_slot_ttl_s(self) -> float:
        """A relay holds its slot for its start transaction, its call (bounded by the call's
        deadline, ``relay_timeout_s``) and its record transaction: the lease outlives that, and the
        slot of a worker that died mid-delivery (or lost its broker or database then) frees itself
        that soon after, not after the task's hard time limit. A relay held up longer than that (a
        database stall) at worst lets one more of its client's relays run meanwhile."""
        return self.relay_timeout_s + self.start_lease_margin_s

    @property
    def start_leases(self) -> dict[str, float]:
        """Seconds a published (or started) submit and relay may take before it is presumed lost
        with its worker (``service.start_leases``): the longest a healthy delivery runs, plus the
        margin. A submit may call twice (an uncertain submit asks ``find``), each call bounded by
        its provider's deadline after up to ``provider_rate_max_wait_s`` for its rate slot; a relay
        calls once, as long as it holds its slots."""
        deadline = max((p.call_deadline_s for p in self.providers.values()), default=30.0)
        submit = 2 * (deadline + self.provider_rate_max_wait_s) + self.start_lease_margin_s
        return {"submit": submit, "relay": self.relay_slot_ttl_s}

    def call_slots(self, provider: str) -> int:
        """How many calls to ``provider`` one calls process makes at once: its own setting, or all
        the threads when it is the only provider, else half of them (a slow vendor holds at most
        those; the others' calls take the rest)."""
        ps = self.providers.get(provider)
        if ps is not None and ps.max_concurrent_calls is not None:
            return ps.max_concurrent_calls
        return self.call_threads if len(self.providers) <= 1 else max(1, self.call_threads // 2)

    @property
    def dispatch(self) -> DispatchPolicy:
        caps = {name: p.max_in_flight for name, p in self.providers.items() if p.max_in_flight > 0}
        return DispatchPolicy(self.dispatch_window, self.priority_aging_s, caps)

    @property
    def endpoint_health(self) -> HealthPolicy:
        """A probe is one delivery: it holds the endpoint's other relays back for its call's deadline
        and a little more, never longer (its worker may die mid-call). The relays that waited out a
        pause come back within ``relay_slot_wait_s`` of its end (their jitter): for that long and a
        second more, the delivery whose failure paused the endpoint leaves the probe to them."""
        return HealthPolicy(
            self.endpoint_failures_to_pause,
            self.endpoint_pause_s,
            self.endpoint_pause_cap_s,
            probe_s=self.relay_timeout_s + 5.0,
            probe_grace_s=self.relay_slot_wait_s + 1.0,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values = read_options(env, OPTIONS)
        _checked_database_url(env, values["database_url"])
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
        if self.database_pooler != "none" and not self.database_url.startswith("postgresql"):
            raise ConfigError("LIAISON_DATABASE_POOLER names a PostgreSQL pooler: DATABASE_URL must be PostgreSQL's")
        if self.default_provider is not None and self.default_provider not in self.providers:
            raise ConfigError("LIAISON_DEFAULT_PROVIDER must name one of LIAISON_PROVIDERS")
        amqp = [p for p in self.providers.values() if p.kind == "amqp"]
        reply_queues = [p.reply_queue for p in amqp]
        if len(set(reply_queues)) < len(reply_queues) or set(reply_queues) & {p.command_queue for p in amqp}:
            # One queue, two readers: a vendor's events would be checked against another's secrets.
            raise ConfigError("each amqp provider needs a REPLY_QUEUE of its own, apart from every COMMAND_QUEUE")
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
        if self.relay_client_concurrency > self.relay_threads // 2:
            # One client's slow endpoints would hold most of the relay process: the others wait.
            raise ConfigError("LIAISON_RELAY_CLIENT_CONCURRENCY must be at most half of LIAISON_RELAY_THREADS")
        if self.relay_endpoint_concurrency > self.relay_client_concurrency:
            raise ConfigError("LIAISON_RELAY_ENDPOINT_CONCURRENCY must be at most LIAISON_RELAY_CLIENT_CONCURRENCY")
        if self.endpoint_pause_cap_s < self.endpoint_pause_s:
            raise ConfigError("LIAISON_ENDPOINT_PAUSE_CAP_S must be at least LIAISON_ENDPOINT_PAUSE_S")
        if self.relay_queue == self.queue:
            raise ConfigError("LIAISON_RELAY_QUEUE must differ from LIAISON_QUEUE (relays run apart from submissions)")
        if self.calls_queue in (self.queue, self.relay_queue):
            raise ConfigError("LIAISON_CALLS_QUEUE must differ from LIAISON_QUEUE and LIAISON_RELAY_QUEUE")
        for name, ps in self.providers.items():
            if ps.max_concurrent_calls is not None and not 1 <= ps.max_concurrent_calls <= self.call_threads:
                raise ConfigError(
                    f"LIAISON_PROVIDER_{name.upper()}_MAX_CONCURRENT_CALLS must be between 1 and LIAISON_CALL_THREADS"
                )
        if self.worker_metrics_port is not None and not self.metrics_token:
            # An open port would hand out what /metrics guards: the same token, or no listener.
            raise ConfigError("LIAISON_WORKER_METRICS_PORT needs LIAISON_METRICS_TOKEN (its scrapes send it)")
        if self.notify_email_kinds is not None and not (self.smtp_host and self.notify_email_to):
            raise ConfigError("LIAISON_NOTIFY_EMAIL_KINDS needs LIAISON_SMTP_HOST and LIAISON_NOTIFY_EMAIL_TO")
        if self.notify_chat_kinds is not None and not self.notify_chat_url:
            raise ConfigError("LIAISON_NOTIFY_CHAT_KINDS needs LIAISON_NOTIFY_CHAT_URL")
        if self.channel_redis_url and not self.channel_redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("LIAISON_CHANNEL_REDIS_URL must be a redis://, rediss:// or unix:// URL")
        if is_sentinel_url(self.broker_url) and not self.redis_sentinel_master:
            # kombu would ask Sentinel for no master and fail at the first publish, far from here.
            raise ConfigError("a sentinel:// CELERY_BROKER_URL needs LIAISON_REDIS_SENTINEL_MASTER")
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
