"""External systems: the Provider protocol and the adapters that speak to real vendors."""

from __future__ import annotations

from core.rate_limit import Limit
from foundation.settings import ProviderSettings, Settings
from workers.limiter import Limiter
from workers.providers.base import JobSnapshot, Provider, SubmitJob
from workers.providers.limited import RateLimitedProvider
from workers.providers.rest import RestProvider

ADAPTERS: dict[str, type[RestProvider]] = {"rest": RestProvider}


def build_providers(settings: Settings, limiter: Limiter) -> dict[str, Provider]:
    """One adapter per configured provider, behind its shared rate limit; our webhook URL is where
    the vendor calls us back."""
    return {
        name: RateLimitedProvider(
            ADAPTERS[ps.kind](
                ps,
                webhook_url=f"{settings.public_url}/webhooks/{name}",
                outcome_limits=settings.outcome_limits,
                max_response_bytes=settings.provider_max_response_bytes,
            ),
            limiter,
            Limit(ps.rate_limit_per_s, ps.rate_limit_burst),
            max_wait_s=settings.provider_rate_max_wait_s,
        )
        for name, ps in settings.providers.items()
    }


__all__ = ["JobSnapshot", "Provider", "ProviderSettings", "RateLimitedProvider", "SubmitJob", "build_providers"]
