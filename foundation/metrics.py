"""Every process-level metric Liaison exports, and the one-line functions that record them.

Metric names and label sets live here only; call sites say *what happened*
(``webhook_rejected("sim", "signature")``), never how it is counted. Label values come from closed
sets (the ``Literal`` types below): a value outside its set is recorded as ``"other"`` instead of
raising, because a metrics typo must never turn a 4xx into a 500, and free-form values (a provider
name taken from a URL path) must never create unbounded series.

Multiprocess: with ``PROMETHEUS_MULTIPROC_DIR`` set *before* ``prometheus_client`` is imported,
every process (gunicorn workers, Celery prefork children) writes its samples to files there, and a
scrape aggregates them: :mod:`foundation.metrics_exposition`, whose ``render`` and multiprocess
helpers callers reach here (``metrics.render``, with ``CONTENT_TYPE_LATEST`` beside it).

Only counters and histograms are defined here: their multiprocess aggregation (sum) is always
right. Gauges describing business state are not process-local; they are computed at scrape time by
:class:`app.observability.collectors.BusinessCollector`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Literal, get_args

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, disable_created_metrics

from core.errors import PermanentError, TransientError, UncertainError
from foundation.metrics_exposition import (
    ensure_multiprocess_dir,
    mark_process_dead,
    multiprocess_dir,
    render,
)

#: The header ``app.observability.celery_signals`` stamps on every published task message (epoch
#: seconds), so a queue that can be peeked (Redis) can tell how long its oldest message has waited.
PUBLISHED_AT_HEADER = "liaison_published_at"

# The exposition (foundation.metrics_exposition's), kept importable here, where every caller reads it.
__all__ = ["CONTENT_TYPE_LATEST", "ensure_multiprocess_dir", "mark_process_dead", "multiprocess_dir", "render"]

# ``*_created`` samples double the output and multiprocess mode cannot produce them anyway: the
# exposition is the same in both modes without them.
disable_created_metrics()
OTHER = "other"

WebhookRejection = Literal[
    "signature",
    "stale",
    "malformed",
    "too_large",
    "unknown_provider",
    "duplicate",
    "unsupported_media_type",
    "unbound",
]
WebhookIgnored = Literal["unknown_type", "unknown_reference"]
SubmissionOutcome = Literal["submitted", "retried", "dead_lettered"]
ProviderOperation = Literal["submit", "find", "status", "cancel"]
CallOutcome = Literal["ok", "transient_error", "permanent_error", "uncertain", "error"]
RetryKind = Literal["submit", "relay", "cancel", "probe", "notify", "channel", "check"]
RelayOutcome = Literal[
    "delivered", "retried", "dead_lettered", "skipped", "parked", "slot_wait", "held", "endpoint_paused", "probe"
]
ScrapeSource = Literal["database", "broker"]
RateLimitScope = Literal["submit", "provider"]
ChannelName = Literal["amqp", "redis"]
HintResult = Literal["checking", "pending", "final", "unknown_job"]
CommandOutcome = Literal["submitted", "replayed", "cancel_requested", "duplicate", "rejected"]

# Provider calls: connect timeouts are ~3 s and read timeouts ~10 s, so the tail matters.
_CALL_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# State change -> callback delivered: milliseconds when healthy, hours when a domain app is down
# (the relay schedule goes up to 10 h between attempts).
_RELAY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 7200.0, 36000.0, 172800.0)

WEBHOOKS_RECEIVED = Counter(
    "liaison_webhooks_received_total", "Vendor webhooks received, before any check.", ["provider"]
)
WEBHOOKS_REJECTED = Counter(
    "liaison_webhooks_rejected_total", "Vendor webhooks refused or not applied, by reason.", ["provider", "reason"]
)
WEBHOOKS_IGNORED = Counter(
    "liaison_webhooks_ignored_total",
    "Verified vendor events stored and answered 2xx but not applied: a type the provider's profile does "
    "not map, or a reference no task has.",
    ["provider", "reason"],
)
SUBMISSIONS = Counter(
    "liaison_submissions_total", "Attempts to hand a task to its provider, by outcome.", ["provider", "outcome"]
)
PROVIDER_CALLS = Counter(
    "liaison_provider_calls_total",
    "HTTP calls to providers, by operation and outcome.",
    ["provider", "operation", "outcome"],
)
PROVIDER_CALL_SECONDS = Histogram(
    "liaison_provider_call_duration_seconds",
    "Latency of calls to providers.",
    ["provider", "operation"],
    buckets=_CALL_BUCKETS,
)
RETRIES = Counter("liaison_retries_total", "Retries scheduled, by kind of work.", ["kind"])
RELAY_DELIVERIES = Counter("liaison_relay_deliveries_total", "Callbacks to domain apps, by outcome.", ["outcome"])
RELAY_LATENCY_SECONDS = Histogram(
    "liaison_relay_delivery_latency_seconds",
    "From a task's state change to its callback being delivered.",
    buckets=_RELAY_BUCKETS,
)
DISPATCH_WAIT_SECONDS = Histogram(
    "liaison_dispatch_wait_seconds",
    "From a task's submit to its release to the broker (0 when it had room at once), by provider and client.",
    ["provider", "client"],
    buckets=(0.0, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0),
)
#: Labelled, as every counter here: an unlabelled one would write its file at import, in gunicorn's
#: master too, and be counted as a worker (test_observability reads the files' pids).
ENDPOINT_PAUSES = Counter(
    "liaison_callback_endpoint_pauses_total",
    "Callback endpoints paused: after failures in a row (first), or again after a failed probe (probe_failed).",
    ["after"],
)
PauseCause = Literal["failures", "probe_failed"]
HTTP_REQUESTS = Counter(
    "liaison_http_requests_total",
    "HTTP requests served, by Flask endpoint and status.",
    ["method", "endpoint", "status"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "liaison_http_request_duration_seconds",
    "Time to produce a response, by Flask endpoint.",
    ["method", "endpoint"],
)
SCRAPE_ERRORS = Counter(
    "liaison_scrape_errors_total",
    "Scrapes whose database or broker part failed (those gauges are missing).",
    ["source"],
)
RATE_LIMITED = Counter(
    "liaison_rate_limited_total",
    "Calls refused a slot by a shared rate limit: a client's submits (429) or a provider call sent back to wait.",
    ["scope", "provider"],
)
VENDOR_CALL_WAITS = Counter(
    "liaison_vendor_call_waits_total",
    "Vendor calls (submit, cancel, probe) sent back to the queue: their vendor's share of this calls "
    "process's threads was taken (LIAISON_PROVIDER_<NAME>_MAX_CONCURRENT_CALLS).",
    ["provider"],
)

CHANNEL_COMMANDS = Counter(
    "liaison_channel_commands_total",
    "Commands from domain apps over a broker channel, by channel and outcome.",
    ["channel", "outcome"],
)
WEBHOOK_HINTS = Counter(
    "liaison_webhook_hints_total",
    "Unsigned hints from confirm providers, by what became of them: checking (a status check of the job "
    "was written), pending (one was pending already), final (the task is final), unknown_job (nothing stored).",
    ["provider", "result"],
)
POLLS = Counter(
    "liaison_polls_total",
    "Polls of open jobs: status checks the poll schedule (LIAISON_PROVIDER_<NAME>_POLL_SCHEDULE_S) asked for.",
    ["provider"],
)
POLLS_PER_JOB = Histogram(
    "liaison_polls_per_job",
    "Polls a job took, observed when a poll finds it final.",
    ["provider"],
    buckets=(1, 2, 3, 5, 10, 20, 50, 100, 300, 1000),
)

_known_providers: set[str] = set()
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def register_providers(names: Iterable[str]) -> None:
    """Provider names allowed as label values (the configured ones); others become ``other``."""
    _known_providers.update(names)


def _provider(name: str) -> str:
    return name if name in _known_providers else OTHER


def _one_of(value: str, allowed: object) -> str:
    return value if value in get_args(allowed) else OTHER


# --- What the rest of the code calls ---------------------------------------------------------


def webhook_received(provider: str) -> None:
    WEBHOOKS_RECEIVED.labels(_provider(provider)).inc()


def webhook_rejected(provider: str, reason: WebhookRejection) -> None:
    WEBHOOKS_REJECTED.labels(_provider(provider), _one_of(reason, WebhookRejection)).inc()


def webhook_hint(provider: str, result: HintResult) -> None:
    WEBHOOK_HINTS.labels(_provider(provider), _one_of(result, HintResult)).inc()


def polled(provider: str, count: int = 1) -> None:
    POLLS.labels(_provider(provider)).inc(count)


def polled_job_finished(provider: str, polls: int) -> None:
    POLLS_PER_JOB.labels(_provider(provider)).observe(polls)


def webhook_ignored(provider: str, reason: str) -> None:
    WEBHOOKS_IGNORED.labels(_provider(provider), _one_of(reason, WebhookIgnored)).inc()


def submission(provider: str, outcome: SubmissionOutcome) -> None:
    SUBMISSIONS.labels(_provider(provider), _one_of(outcome, SubmissionOutcome)).inc()


def rate_limited(scope: RateLimitScope, provider: str | None = None) -> None:
    RATE_LIMITED.labels(_one_of(scope, RateLimitScope), _provider(provider) if provider else "").inc()


def vendor_call_wait(provider: str) -> None:
    VENDOR_CALL_WAITS.labels(_provider(provider)).inc()


def channel_command(channel: str, outcome: str) -> None:
    CHANNEL_COMMANDS.labels(_one_of(channel, ChannelName), _one_of(outcome, CommandOutcome)).inc()


def provider_call(provider: str, operation: ProviderOperation, outcome: CallOutcome, seconds: float) -> None:
    name, op = _provider(provider), _one_of(operation, ProviderOperation)
    PROVIDER_CALLS.labels(name, op, _one_of(outcome, CallOutcome)).inc()
    PROVIDER_CALL_SECONDS.labels(name, op).observe(max(seconds, 0.0))


def call_outcome(exc: BaseException | None) -> CallOutcome:
    """Our error tree (``core.errors``) as a call outcome label."""
    if exc is None:
        return "ok"
    if isinstance(exc, UncertainError):
        return "uncertain"
    if isinstance(exc, PermanentError):
        return "permanent_error"
    if isinstance(exc, TransientError):
        return "transient_error"
    return "error"


@contextmanager
def timed_provider_call(provider: str, operation: ProviderOperation) -> Iterator[None]:
    """``with timed_provider_call(p.name, "submit"): job_id = p.submit(job)`` -- latency and outcome,
    the outcome taken from the exception that leaves the block (which is re-raised untouched)."""
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        provider_call(provider, operation, call_outcome(exc), time.perf_counter() - start)
        raise
    provider_call(provider, operation, "ok", time.perf_counter() - start)


def retry(kind: RetryKind) -> None:
    RETRIES.labels(_one_of(kind, RetryKind)).inc()


def failed_attempt(kind: RetryKind, *, dead_lettered: bool, provider: str | None = None) -> None:
    """One failed attempt of outbox work, as the retry adapter sees it (``workers.tasks.outcomes``):
    counts the retry (unless it is the end) and the kind's own outcome -- submissions by provider,
    relay deliveries -- so that one call there covers every kind."""
    outcome: Literal["retried", "dead_lettered"] = "dead_lettered" if dead_lettered else "retried"
    if not dead_lettered:
        retry(kind)
    if kind == "submit" and provider is not None:
        submission(provider, outcome)
    elif kind in ("relay", "channel"):  # a channel event is a callback over a broker
        relay_delivery(outcome)


def dispatch_wait(provider: str, client: str, seconds: float) -> None:
    """A task released to the broker after waiting ``seconds`` in the database (service.dispatch, admission)."""
    DISPATCH_WAIT_SECONDS.labels(_provider(provider), client[:100]).observe(seconds)


def endpoint_paused(after: PauseCause) -> None:
    ENDPOINT_PAUSES.labels(_one_of(after, PauseCause)).inc()


def relay_delivery(outcome: RelayOutcome, end_to_end_seconds: float | None = None) -> None:
    """A relay attempt's outcome; for ``delivered``, pass the time since the state change
    (:func:`since` of the payload's ``occurred_at``) to feed the latency histogram."""
    RELAY_DELIVERIES.labels(_one_of(outcome, RelayOutcome)).inc()
    if end_to_end_seconds is not None:
        RELAY_LATENCY_SECONDS.observe(max(end_to_end_seconds, 0.0))


def since(moment: datetime | str | None) -> float | None:
    """Seconds from ``moment`` (an aware datetime or ISO-8601 string, as stored in relay payloads)
    until now; None when it is missing or unreadable, so a bad payload skips one observation."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return None
    if not isinstance(moment, datetime):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((datetime.now(UTC) - moment).total_seconds(), 0.0)


def http_request(method: str, endpoint: str, status: int, seconds: float) -> None:
    """Recorded by :mod:`app.observability.web` for every request; ``endpoint`` is the Flask
    endpoint name (bounded), never the raw path."""
    method = method if method in _METHODS else OTHER
    HTTP_REQUESTS.labels(method, endpoint, str(status)).inc()
    HTTP_REQUEST_SECONDS.labels(method, endpoint).observe(max(seconds, 0.0))


def scrape_error(source: ScrapeSource) -> None:
    SCRAPE_ERRORS.labels(_one_of(source, ScrapeSource)).inc()
