"""Settings become retry policies here, and only here: the tasks and the tests use the same ones.

The policy itself (``core.retry_policy``) is pure data and arithmetic; this module reads the
deployment's ``LIAISON_PROVIDER_<NAME>_SUBMIT_*`` and ``LIAISON_RELAY_*`` settings into it.
"""

from __future__ import annotations

from core.retry_policy import RetryPolicy
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings


def provider_policy(settings: ProviderSettings) -> RetryPolicy:
    """The policy for calls to one provider (submit, and cancel): its ``SUBMIT_*`` settings.

    The one place settings become a provider policy, so the tasks and the tests use the same one.
    """
    return RetryPolicy(
        max_attempts=settings.submit_max_attempts,
        base_s=settings.submit_backoff_base_s,
        cap_s=settings.submit_backoff_cap_s,
        max_total_s=settings.submit_max_total_s,
    )


def relay_policy(settings: Settings, jitter: float = 0.2) -> RetryPolicy:
    """The policy for relays to domain apps: ``LIAISON_RELAY_*`` settings, each step ±``jitter``.

    The cap is the largest step *plus* its jitter: a cap at the largest step itself would clip the
    upper half of the jitter off the long steps (10 h could never become 12 h), so they would
    bunch up at the cap instead of spreading out.
    """
    schedule = settings.relay_schedule_s
    return RetryPolicy(
        max_attempts=settings.relay_max_attempts,
        schedule=schedule,
        jitter=jitter,
        cap_s=max(schedule, default=0.0) * (1 + jitter),
        max_total_s=settings.relay_max_total_s,
    )


def notify_policy(settings: Settings) -> RetryPolicy:
    """The policy for messages to people (``LIAISON_NOTIFY_*``): backoff doubling to a cap."""
    return RetryPolicy(
        max_attempts=settings.notify_max_attempts,
        base_s=settings.notify_backoff_base_s,
        cap_s=settings.notify_backoff_cap_s,
    )
