"""How a configured provider looks to operators (``GET /admin/v1/providers``, the console's
providers page, ``liaison providers check``): what it is and how it is reached, never a secret.

Built from the settings alone (no call, no query): the adapter's kind, the inbound scheme, the
profile's path, the poll schedule and the limits. Secrets (``_API_KEY``, ``_WEBHOOK_SECRETS``,
``_AMQP_URL``) are left out; only how many webhook secrets are configured is shown (two while one
rotates). The base URL is shown as ``core.urls.strip_url`` writes it (no userinfo or query)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.urls import strip_url
from foundation.provider_settings import ProviderSettings

#: The metric a provider's refused webhooks are counted in, by ``reason`` (docs/observability.md).
REFUSALS_METRIC = "liaison_webhooks_rejected_total"


def provider_body(ps: ProviderSettings, *, default: bool = False) -> dict[str, Any]:
    return {
        "name": ps.name,
        "kind": ps.kind,
        "default": default,
        "base_url": strip_url(ps.base_url) if ps.base_url else None,
        "webhook_scheme": ps.webhook_scheme,
        "webhook_secrets": len(ps.webhook_secrets),
        "profile": ps.vendor_profile.path if ps.vendor_profile is not None else None,
        "poll_schedule_s": list(ps.poll_schedule_s) if ps.poll_schedule_s else None,
        "max_in_flight": ps.max_in_flight,
        "rate_limit_per_s": ps.rate_limit_per_s,
        "rate_limit_burst": ps.rate_limit_burst,
        "call_deadline_s": ps.call_deadline_s,
        "refusals_metric": f'{REFUSALS_METRIC}{{provider="{ps.name}"}}',
    }


def provider_bodies(providers: Mapping[str, ProviderSettings], default: str | None) -> list[dict[str, Any]]:
    """Every configured provider, by name; ``default``: ``LIAISON_DEFAULT_PROVIDER`` (the only
    provider, when there is just one)."""
    return [provider_body(providers[name], default=name == default) for name in sorted(providers)]
