"""The metric functions: bounded labels, outcome mapping, and the single-process exposition."""

from __future__ import annotations

from contextlib import nullcontext
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app.observability.migrations import MigrationStatus
from core.errors import PermanentError, TransientError, UncertainError
from foundation import metrics


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def _providers() -> None:
    metrics.register_providers(["acme"])


def test_rejections_are_counted_by_provider_and_reason() -> None:
    before = _value("liaison_webhooks_rejected_total", provider="acme", reason="signature")
    metrics.webhook_rejected("acme", "signature")
    assert _value("liaison_webhooks_rejected_total", provider="acme", reason="signature") == before + 1


def test_label_values_outside_their_set_become_other() -> None:
    """A provider name from a URL path or a typo must neither raise nor create a new series."""
    before = _value("liaison_webhooks_rejected_total", provider="other", reason="other")
    metrics.webhook_rejected("no-such-provider-" + "x" * 50, "too-large")  # type: ignore[arg-type]
    assert _value("liaison_webhooks_rejected_total", provider="other", reason="other") == before + 1


@pytest.mark.parametrize(
    "exc, outcome",
    [
        (None, "ok"),
        (TransientError("503"), "transient_error"),
        (PermanentError("400"), "permanent_error"),
        (UncertainError("read timeout"), "uncertain"),
        (RuntimeError("bug"), "error"),
    ],
)
def test_timed_provider_call_records_latency_and_outcome(exc: Exception | None, outcome: str) -> None:
    before = _value("liaison_provider_calls_total", provider="acme", operation="submit", outcome=outcome)
    count_before = _value("liaison_provider_call_duration_seconds_count", provider="acme", operation="submit")
    with pytest.raises(type(exc)) if exc else nullcontext(), metrics.timed_provider_call("acme", "submit"):
        if exc:
            raise exc
    assert _value("liaison_provider_calls_total", provider="acme", operation="submit", outcome=outcome) == before + 1
    assert (
        _value("liaison_provider_call_duration_seconds_count", provider="acme", operation="submit") == count_before + 1
    )


def test_relay_latency_is_observed_only_when_given() -> None:
    count = _value("liaison_relay_delivery_latency_seconds_count")
    metrics.relay_delivery("retried")
    metrics.relay_delivery("delivered", metrics.since((datetime.now(UTC) - timedelta(seconds=3)).isoformat()))
    assert _value("liaison_relay_delivery_latency_seconds_count") == count + 1
    assert _value("liaison_relay_deliveries_total", outcome="retried") >= 1


def test_a_failed_attempt_counts_the_retry_and_the_kinds_outcome() -> None:
    retries = _value("liaison_retries_total", kind="submit")
    retried = _value("liaison_submissions_total", provider="acme", outcome="retried")
    dead = _value("liaison_relay_deliveries_total", outcome="dead_lettered")
    metrics.failed_attempt("submit", dead_lettered=False, provider="acme")
    metrics.failed_attempt("relay", dead_lettered=True)
    assert _value("liaison_retries_total", kind="submit") == retries + 1
    assert _value("liaison_submissions_total", provider="acme", outcome="retried") == retried + 1
    assert _value("liaison_relay_deliveries_total", outcome="dead_lettered") == dead + 1


def test_since_reads_iso_strings_and_datetimes() -> None:
    recent = metrics.since(datetime.now(UTC) - timedelta(seconds=10))
    naive = metrics.since("2000-01-01T00:00:00")
    assert recent is not None and naive is not None
    assert 9 < recent < 11
    assert naive > 0  # naive means UTC
    assert metrics.since("yesterday") is None
    assert metrics.since(None) is None
    assert metrics.since(datetime.now(UTC) + timedelta(hours=1)) == 0.0


def test_render_exposes_the_process_registry_in_prometheus_text() -> None:
    metrics.retry("relay")
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    assert "liaison_retries" in families  # the parser drops the _total suffix from the family name
    assert any(s.labels == {"kind": "relay"} and s.value >= 1 for s in families["liaison_retries"].samples)


def test_migration_status_pending_only_when_behind() -> None:
    assert MigrationStatus(current=(), heads=("0002",), unknown=()).pending
    assert MigrationStatus(current=("0001",), heads=("0002",), unknown=()).pending
    assert not MigrationStatus(current=("0002",), heads=("0002",), unknown=()).pending
    # A newer release already migrated (rolling deploy): not this release's business.
    assert not MigrationStatus(current=("0003",), heads=("0002",), unknown=("0003",)).pending
    assert "migrations pending" in MigrationStatus(current=(), heads=("0002",), unknown=()).describe()
