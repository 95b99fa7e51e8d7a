"""Every process-wide setting Liaison reads, declared once: one ``Option`` row each (variable,
attribute, parser, default, doc, secret?), grouped in sections. ``foundation.settings`` reads the
environment through these rows, and ``app.settings_docs`` writes ``.env.example`` and docs/settings.md
from them. The ``LIAISON_PROVIDER_<NAME>_*`` block, read once per provider, is the table of
``foundation.provider_setting_table``."""

from __future__ import annotations

from pathlib import Path

from core.queue_types import CLASSIC, QUEUE_TYPES
from foundation.database_urls import DATABASE_URL
from foundation.options import (
    ADDRESSES,
    ALLOW_LIST,
    AMQP_URL,
    DELAYS,
    HTTP_URL,
    IP_ADDRESS,
    KINDS,
    MIN_ADMIN_TOKEN_LEN,
    MIN_METRICS_TOKEN_CHARS,
    NAMES,
    OPTIONAL_HTTP_URL,
    PORT,
    SERVICE_URL,
    TEXT,
    Option,
    Parser,
    Section,
    choice,
    decimal,
    fraction,
    integer,
    section,
    token,
)
from webhooks.signing import DEFAULT_TOLERANCE_S
from wire.bounded_json import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING

# The table is data, one setting a row: kept as written rather than one argument a line.
# fmt: off
SECTIONS: tuple[Section, ...] = (
    section(
        "Storage and broker",
        Option("LIAISON_VAR_DIR", "var_dir", Parser(lambda n, raw: Path(raw).resolve(), "path"), "var",
               "where the embedded SQLite file and broker folders live"),
        Option("DATABASE_URL", "database_url", DATABASE_URL, "sqlite:///<LIAISON_VAR_DIR>/liaison.db",
               "production: postgres://user@host/db (postgresql:// too; both use psycopg 3); "
               "a SQLite file's folder must exist",
               derive=lambda v: f"sqlite:///{v['var_dir'] / 'liaison.db'}"),
        Option("LIAISON_DATABASE_POOLER", "database_pooler", choice("none", "pgbouncer-transaction"), "none",
               "what stands between Liaison and PostgreSQL; pgbouncer-transaction = PgBouncer in "
               "pool_mode=transaction (psycopg prepares no statements; docs/runbook.md, behind PgBouncer)"),
        Option("CELERY_BROKER_URL", "broker_url", SERVICE_URL, "filesystem://localhost//",
               "or redis://host:6379/0 or amqp://user:pass@host:5672// or "
               "sentinel://host1:26379;sentinel://host2:26379 (Redis Sentinel, with LIAISON_REDIS_SENTINEL_MASTER)"),
        # docs/runbook.md "HA brokers": a queue's type is fixed when first declared; switch under new names.
        Option("LIAISON_RABBITMQ_QUEUE_TYPE", "rabbitmq_queue_type", choice(*QUEUE_TYPES), CLASSIC,
               "RabbitMQ: quorum declares every queue replicated (needs new queue names to switch: "
               "see the runbook); classic keeps the queues existing deployments have"),
        Option("LIAISON_REDIS_SENTINEL_MASTER", "redis_sentinel_master", TEXT, "",
               "the master name Sentinel watches; needed (and used only) with a sentinel:// broker URL"),
        Option("LIAISON_BROKER_FOLDER", "broker_folder", Parser(lambda n, raw: Path(raw), "path"),
               "<LIAISON_VAR_DIR>/broker", "filesystem:// broker only; shared by web, worker, beat, Flower",
               derive=lambda v: str(v["var_dir"] / "broker")),
    ),
    section(
        "HTTP",
        Option("LIAISON_PUBLIC_URL", "public_url", HTTP_URL, "http://127.0.0.1:5000",
               "how external systems reach /webhooks/<provider>"),
        Option("LIAISON_ADMIN_TOKEN", "admin_token",
               token(MIN_ADMIN_TOKEN_LEN, " (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
                                          "or empty to turn the admin API off"),
               "", "bearer token for /admin/v1, at least 32 characters; unset = admin API off", secret=True),
        Option("LIAISON_MAX_BODY_BYTES", "max_body_bytes", integer(1024), "262144", "larger request bodies get 413"),
        Option("LIAISON_HEADER_READ_TIMEOUT_S", "header_read_timeout_s", decimal(0.1), "10",
               "a request's head must arrive whole within this of its connection (or of a kept-alive "
               "connection's next byte); later: 408, closed. Read off-thread: slow clients hold no thread"),
        Option("LIAISON_BODY_READ_TIMEOUT_S", "body_read_timeout_s", decimal(0.1), "30",
               "a request's body must arrive whole within this of its head; later: 408, closed"),
    ),
    section(
        "Bounded input (issue 8): a task's input and a vendor's outcome",
        Option("LIAISON_MAX_JSON_DEPTH", "max_json_depth", integer(1), str(DEFAULT_MAX_DEPTH),
               f"nesting levels of input/outcome (at most {MAX_DEPTH_CEILING - 2}); deeper: 422 / 400"),
        Option("LIAISON_MAX_INPUT_BYTES", "max_input_bytes", integer(16), str(DEFAULT_MAX_BYTES),
               "canonical JSON bytes of a task's input; larger: 422"),
        Option("LIAISON_MAX_OUTCOME_BYTES", "max_outcome_bytes", integer(16), str(DEFAULT_MAX_BYTES),
               "canonical JSON bytes of a vendor's outcome; larger: 413 / refused"),
    ),
    section(
        "Providers (external systems); one LIAISON_PROVIDER_<NAME>_* block per name, see below",
        Option("LIAISON_PROVIDERS", "provider_names", NAMES, "", "comma-separated names", example="simulator"),
        Option("LIAISON_DEFAULT_PROVIDER", "default_provider", TEXT, "the only provider, if just one",
               "the provider of a task that names none", example="simulator",
               derive=lambda v: v["provider_names"][0] if len(v["provider_names"]) == 1 else ""),
    ),
    section(
        "Webhooks in, callbacks out",
        Option("LIAISON_WEBHOOK_TOLERANCE_S", "webhook_tolerance_s", integer(1), str(DEFAULT_TOLERANCE_S),
               "webhook-timestamp must be within this, both ways"),
        Option("LIAISON_PROCESSED_RETENTION_S", "processed_retention_s", integer(1), "345600",
               "96 h of inbox dedup; must exceed 2x the tolerance"),
        Option("LIAISON_RELAY_TIMEOUT_S", "relay_timeout_s", decimal(0.01), "15",
               "one callback call, connect to last byte, ends by this"),
        Option("LIAISON_RELAY_MAX_ATTEMPTS", "relay_max_attempts", integer(1), "8", "callback attempts in all"),
        # After the first try: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (±20 %).
        Option("LIAISON_RELAY_SCHEDULE_S", "relay_schedule_s", DELAYS, "5,300,1800,7200,18000,36000,36000",
               "waits between relay attempts (+-20 %), Standard-Webhooks-like"),
        Option("LIAISON_RELAY_MAX_TOTAL_S", "relay_max_total_s", decimal(1.0), "172800",
               "no relay attempt starts later than this after the first"),
    ),
    section(
        "Outbound guard and bounded calls (issue 8)",
        Option("LIAISON_OUTBOUND_ALLOW", "outbound_allow", ALLOW_LIST, "",
               "exceptions to the outbound guard for callback URLs (e.g. 127.0.0.1:5002); empty in production"),
        Option("LIAISON_PROVIDER_MAX_RESPONSE_BYTES", "provider_max_response_bytes", integer(1024), "1048576",
               "most of a provider's response body that is read (a job status with its outcome)"),
        Option("LIAISON_CALLBACK_MAX_RESPONSE_BYTES", "callback_max_response_bytes", integer(0), "4096",
               "most of a callback endpoint's response body that is read (only its status matters)"),
    ),
    section(
        "Workers and beat",
        Option("LIAISON_QUEUE", "queue", TEXT, "liaison",
               "the Celery work queue (RabbitMQ: also <queue>.dlx / <queue>.dead)"),
        # Longest wait handed to Celery as a countdown; longer waits are held in the database and
        # re-published by the outbox sweep, so no countdown comes near the Redis visibility_timeout.
        Option("LIAISON_MAX_COUNTDOWN_S", "max_countdown_s", integer(1), "900",
               "longer retry waits are held in the database, not at the broker"),
        Option("LIAISON_MAX_DELIVERIES", "max_deliveries", integer(1), "5",
               "a message started this often without finishing is poison"),
        Option("LIAISON_ORPHAN_WINDOW_S", "orphan_window_s", integer(1), "3600",
               "an unbound orphan event opens an incident after this"),
        # A reconcile run ends before beat's next one is due; what is left is the next run's oldest work.
        Option("LIAISON_RECONCILE_MAX_RUN_S", "reconcile_max_run_s", integer(1), "240",
               "a reconcile run stops claiming work after this (beat runs it every 300 s)"),
        Option("LIAISON_BEAT_BATCH", "beat_batch", integer(1), "500", "rows a beat job handles per transaction"),
    ),
    section(
        "Isolation: bounded tasks, the relay queue, relay capacity and caps, endpoint health (issues 8, 20)",
        # Above the longest outbound call (a submit may make two: submit, then find). The soft limit
        # ends the attempt as a failed one; the hard one kills the pool process.
        Option("LIAISON_TASK_SOFT_TIME_LIMIT_S", "task_soft_time_limit_s", integer(1), "120",
               "submit/relay/cancel on a prefork pool: past it the attempt is a failed one (retried); "
               "the Procfile's calls and relay run on threads, where each call's own deadline bounds them"),
        Option("LIAISON_TASK_TIME_LIMIT_S", "task_time_limit_s", integer(1), "150",
               "...and past this the pool process is killed (must exceed the soft limit)"),
        Option("LIAISON_BEAT_SOFT_TIME_LIMIT_S", "beat_soft_time_limit_s", integer(1), "280",
               "beat jobs; must exceed LIAISON_RECONCILE_MAX_RUN_S"),
        Option("LIAISON_BEAT_TIME_LIMIT_S", "beat_time_limit_s", integer(1), "300", "beat jobs' hard limit"),
        Option("LIAISON_RELAY_QUEUE", "relay_queue", TEXT, "<LIAISON_QUEUE>.relay",
               "relays' own queue (Procfile: relay)", derive=lambda v: v["queue"] + ".relay"),
        # A vendor call waits on the vendor's network too: submissions and cancellations run on
        # threads (Procfile calls), each provider held to a share of them (MAX_CONCURRENT_CALLS).
        Option("LIAISON_CALLS_QUEUE", "calls_queue", TEXT, "<LIAISON_QUEUE>.calls",
               "vendor calls' own queue: submit, cancel, probe (Procfile: calls)",
               derive=lambda v: v["queue"] + ".calls"),
        Option("LIAISON_CALL_THREADS", "call_threads", integer(2), "16",
               "vendor calls one calls process holds at once (Procfile calls: --pool threads --concurrency)"),
        # A delivery waits on someone else's network: the relay process holds many at once on
        # threads (Procfile relay), and the caps below keep each client and endpoint to a share of them.
        Option("LIAISON_RELAY_THREADS", "relay_threads", integer(1), "64",
               "deliveries one relay process holds at once (Procfile relay: --pool threads --concurrency)"),
        Option("LIAISON_RELAY_CLIENT_CONCURRENCY", "relay_client_concurrency", integer(1), "16",
               "relay deliveries one client may have running at once, all workers together "
               "(at most half of LIAISON_RELAY_THREADS)"),
        Option("LIAISON_RELAY_ENDPOINT_CONCURRENCY", "relay_endpoint_concurrency", integer(1), "4",
               "...and one callback origin of a client (at most LIAISON_RELAY_CLIENT_CONCURRENCY)"),
        Option("LIAISON_RELAY_SLOT_WAIT_S", "relay_slot_wait_s", decimal(0.1), "2",
               "a relay finding its client's or endpoint's slots taken is re-queued after this"
               " (and, 1 s more, how long the delivery that paused an endpoint leaves its probe to the others)"),
        Option("LIAISON_ENDPOINT_FAILURES_TO_PAUSE", "endpoint_failures_to_pause", integer(1), "5",
               "deliveries in a row that found a callback endpoint down (no answer, 5xx, 408, 429;"
               " never a 3xx or other 4xx) that pause it (its relays wait, then one probes)"),
        Option("LIAISON_ENDPOINT_PAUSE_S", "endpoint_pause_s", decimal(0.1), "30",
               "an endpoint's first pause; each failed probe doubles it"),
        Option("LIAISON_ENDPOINT_PAUSE_CAP_S", "endpoint_pause_cap_s", decimal(0.1), "900",
               "the longest pause of an endpoint"),
    ),
    section(
        "Retention (issue 12): finished work is deleted after this long (beat, hourly; docs/runbook.md)",
        Option("LIAISON_RETENTION_TASKS_S", "retention_tasks_s", integer(1), "2592000",
               "finished tasks with their events and outbox rows (30 days); "
               "kept while a callback is undelivered or dead-lettered"),
        Option("LIAISON_RETENTION_OUTBOX_S", "retention_outbox_s", integer(1), "2592000",
               "done outbox rows of settled tasks, when tasks are kept longer (otherwise they go with their task)"),
        Option("LIAISON_RETENTION_DEAD_LETTERS_S", "retention_dead_letters_s", integer(1), "2592000",
               "replayed or discarded dead letters, after they were closed (open ones never)"),
        Option("LIAISON_RETENTION_INCIDENTS_S", "retention_incidents_s", integer(1), "2592000",
               "resolved incidents, after they were resolved (open ones never)"),
        Option("LIAISON_RETENTION_ORPHANS_S", "retention_orphans_s", integer(1), "2592000",
               "bound or discarded orphan events (open ones never)"),
        Option("LIAISON_RETENTION_EXPORT_DIR", "retention_export_dir", TEXT, "",
               "if set, removed rows are first appended as JSON lines to <dir>/<kind>-<date>.jsonl; "
               "a failed write deletes nothing"),
    ),
    section(
        "Outbox",
        Option("LIAISON_OUTBOX_GRACE_S", "outbox_grace_s", integer(0), "10",
               "unpublished this long after commit: the sweep publishes it"),
        Option("LIAISON_OUTBOX_LEASE_S", "outbox_lease_s", integer(1), "1800",
               "published (or due) this long but not done: presumed lost"),
        Option("LIAISON_START_LEASE_MARGIN_S", "start_lease_margin_s", decimal(0.1), "30",
               "a submit or relay not started (or not finished) this long past the longest its call may "
               "take is presumed lost with its worker: re-driven then, not after the outbox lease; also "
               "how long a dead relay's slots stay held past LIAISON_RELAY_TIMEOUT_S"),
    ),
    section(
        "Limits and internal surfaces (issue 8; docs/architecture.md \"Limits\", docs/observability.md)",
        Option("LIAISON_CLIENT_SUBMIT_RATE_PER_S", "client_submit_rate_per_s", decimal(0.001), "10",
               "POST /api/v1/tasks per client, sustained; over it 429 + Retry-After"),
        Option("LIAISON_CLIENT_SUBMIT_BURST", "client_submit_burst", integer(1), "20",
               "... and at once after a quiet spell"),
        Option("LIAISON_CLIENT_MAX_OPEN_TASKS", "client_max_open_tasks", integer(1), "10000",
               "non-final tasks per client; over it 429 (clients limits NAME overrides)"),
        # Fair dispatch (issue 20, core/fair_share.py): a backlog waits in the database, not in the broker.
        Option("LIAISON_DISPATCH_WINDOW", "dispatch_window", integer(1), "16",
               "submissions of one client to one provider on their way at once (x its weight); the rest wait "
               "in the database, released in priority order. As many as the calls process runs at once "
               "(LIAISON_CALL_THREADS): another client's task waits behind one round of calls at most"),
        Option("LIAISON_PRIORITY_AGING_S", "priority_aging_s", decimal(0.001), "60",
               "waiting this long is worth one priority level: a priority-5 task is overtaken only by "
               "tasks created less than 4 x this after it"),
        Option("LIAISON_RATE_LIMIT_STORAGE", "rate_limit_storage", choice("auto", "redis", "database"), "auto",
               "where shared rate limits live; auto = redis when the broker is Redis, else database"),
        Option("LIAISON_RATE_LIMIT_REDIS_URL", "rate_limit_redis_url", SERVICE_URL, "",
               "default: the broker URL when it is Redis", secret=True),
        Option("LIAISON_PROVIDER_RATE_MAX_WAIT_S", "provider_rate_max_wait_s", decimal(0.0), "2",
               "a worker sleeps up to this for a provider slot; later ones retry via the broker"),
        Option("LIAISON_METRICS_TOKEN", "metrics_token", token(MIN_METRICS_TOKEN_CHARS), "",
               "bearer token for /metrics, /readyz and worker metrics; unset = /metrics, /readyz 404",
               secret=True),
        Option("LIAISON_METRICS_CACHE_S", "metrics_cache_s", decimal(0.0), "5",
               "business gauges are read from the database at most this often (per process)"),
        # Issue 10: a worker host serves its own counters, so web and workers may run on different hosts.
        Option("LIAISON_WORKER_METRICS_PORT", "worker_metrics_port", PORT, "",
               "a celery worker's main process serves its host's PROMETHEUS_MULTIPROC_DIR at :PORT/metrics "
               "(needs LIAISON_METRICS_TOKEN); unset = off"),
        Option("LIAISON_WORKER_METRICS_ADDRESS", "worker_metrics_address", IP_ADDRESS, "127.0.0.1",
               "where it listens: 0.0.0.0 (or ::) for a Prometheus on another host"),
    ),
    section(
        "Operator console (issue 11; docs/console.md)",
        Option("LIAISON_CONSOLE_SESSION_S", "console_session_s", integer(60), "28800",
               "a console sign-in lasts this long, then its session is refused on the server (sign-out ends "
               "it sooner, in every web process; rotating LIAISON_ADMIN_TOKEN, which signs the cookie, signs "
               "everyone out)"),
        Option("LIAISON_FLOWER_URL", "flower_url", TEXT, "",
               "where operators reach Flower, linked from the console's overview; unset = no link"),
    ),
    section(
        "Start-up (issue 9)",
        # A service restarting alongside us gets this long; a wrong host fails after it, not never.
        Option("LIAISON_STARTUP_WAIT_S", "startup_wait_s", decimal(0.0), "10",
               "web, worker and beat wait up to this for the database and broker, then exit with one line"),
    ),
    section(
        "Notifications to people (issue 13): incidents opened and resolved, by email and chat",
        Option("LIAISON_NOTIFY_EMAIL_KINDS", "notify_email_kinds", KINDS, "",
               "incident kinds mailed: * for all, or a comma list; empty = no email", example="*"),
        Option("LIAISON_NOTIFY_CHAT_KINDS", "notify_chat_kinds", KINDS, "",
               "incident kinds posted to the chat webhook: * or a comma list; empty = no chat"),
        Option("LIAISON_SMTP_HOST", "smtp_host", TEXT, "", "the mail server (needed for email)"),
        Option("LIAISON_SMTP_PORT", "smtp_port", integer(1), "587", "its port"),
        Option("LIAISON_SMTP_SECURITY", "smtp_security", choice("starttls", "tls", "none"), "starttls",
               "starttls, tls (implicit, port 465) or none (a local relay only)"),
        Option("LIAISON_SMTP_USERNAME", "smtp_username", TEXT, "", "login, if the server wants one"),
        Option("LIAISON_SMTP_PASSWORD", "smtp_password", TEXT, "", "its password", secret=True),
        Option("LIAISON_NOTIFY_EMAIL_FROM", "notify_email_from", TEXT, "liaison@localhost", "the sender address"),
        Option("LIAISON_NOTIFY_EMAIL_TO", "notify_email_to", ADDRESSES, "",
               "recipients, comma-separated (needed for email)", example="oncall@example.com"),
        Option("LIAISON_NOTIFY_CHAT_URL", "notify_chat_url", OPTIONAL_HTTP_URL, "",
               "a Slack-compatible incoming-webhook URL (needed for chat; through the outbound guard)",
               secret=True),
        Option("LIAISON_NOTIFY_TIMEOUT_S", "notify_timeout_s", decimal(0.1), "10", "one send, connect to answer"),
        Option("LIAISON_NOTIFY_MAX_ATTEMPTS", "notify_max_attempts", integer(1), "8",
               "sends in all, then a dead letter"),
        Option("LIAISON_NOTIFY_BACKOFF_BASE_S", "notify_backoff_base_s", decimal(0.0), "5",
               "first retry wait, doubling"),
        Option("LIAISON_NOTIFY_BACKOFF_CAP_S", "notify_backoff_cap_s", decimal(0.0), "600", "longest retry wait"),
        Option("LIAISON_NOTIFY_DIGEST_THRESHOLD", "notify_digest_threshold", integer(1), "5",
               "messages per window; more pending than that are held and sent as one digest"),
        Option("LIAISON_NOTIFY_DIGEST_WINDOW_S", "notify_digest_window_s", decimal(1.0), "60",
               "the window, and how long a burst is gathered before its digest goes"),
    ),
    section(
        "Domain apps over a broker (issue 13): clients whose channel is amqp or redis",
        Option("LIAISON_CHANNEL_AMQP_URL", "channel_amqp_url", AMQP_URL, "",
               "the RabbitMQ of amqp-channel clients (needed by any): commands in, events out", secret=True),
        Option("LIAISON_CHANNEL_REDIS_URL", "channel_redis_url", SERVICE_URL, "",
               "the Redis of redis-channel clients (needed by any), redis://host:6379/0", secret=True),
        Option("LIAISON_CHANNEL_PREFIX", "channel_prefix", TEXT, "liaison",
               "names the queues, exchange and streams: <prefix>.<client>.commands, <prefix>.events, …"),
        Option("LIAISON_CHANNEL_EVENTS_MAXLEN", "channel_events_maxlen", integer(100), "100000",
               "a client's events stream keeps about this many entries (XADD MAXLEN ~): read them sooner"),
        Option("LIAISON_CHANNEL_CLAIM_IDLE_S", "channel_claim_idle_s", decimal(1.0), "60",
               "a command a dead consumer left pending this long is claimed by another (XAUTOCLAIM)"),
        Option("LIAISON_CHANNEL_TIMEOUT_S", "channel_timeout_s", decimal(0.1), "10",
               "connect and publish-confirm timeout of one event"),
    ),
    section(
        "Traces (issue 22; docs/observability.md)",
        Option("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint", OPTIONAL_HTTP_URL, "",
               "an OpenTelemetry collector's OTLP/HTTP base URL (spans go to <it>/v1/traces); "
               "unset = no tracing: no SDK, no instrumentation"),
        Option("OTEL_SERVICE_NAME", "otel_service_name", TEXT, "",
               "service.name of this process's spans; unset = liaison-web, liaison-worker, liaison-calls, "
               "liaison-relay, liaison-beat or liaison-cli, by process"),
        Option("OTEL_TRACES_SAMPLER", "otel_traces_sampler",
               choice("parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio",
                      "always_on", "always_off", "traceidratio"),
               "parentbased_always_on",
               "which traces are recorded; parentbased_* follow a parent span of the same process only: "
               "a caller's or a task's traceparent never decides by its sampled flag (our rule does)"),
        Option("OTEL_TRACES_SAMPLER_ARG", "otel_traces_sampler_arg", fraction(), "1",
               "the share of traces the *traceidratio samplers record (1 = all), decided on the trace id"),
    ),
    section(
        "Logs",
        Option("LIAISON_LOG_LEVEL", "log_level", choice("debug", "info", "warning", "error", upper=True), "info",
               "debug, info, warning or error"),
        Option("LIAISON_LOG_FORMAT", "log_format", choice("console", "json"), "console",
               "json in production: one JSON object per line"),
    ),
)

# fmt: on

OPTIONS: tuple[Option, ...] = tuple(o for s in SECTIONS for o in s.options)
