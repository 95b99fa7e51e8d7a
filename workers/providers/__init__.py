"""External systems: the Provider protocol and the adapters that speak to real vendors."""

from __future__ import annotations

from app.settings import ProviderSettings, Settings
from workers.providers.base import JobSnapshot, Provider, SubmitJob
from workers.providers.rest import RestProvider

ADAPTERS: dict[str, type[RestProvider]] = {"rest": RestProvider}


def build_providers(settings: Settings) -> dict[str, Provider]:
    """One adapter per configured provider; our webhook URL is where the vendor calls us back."""
    return {
        name: ADAPTERS[ps.kind](ps, webhook_url=f"{settings.public_url}/webhooks/{name}",
                                outcome_limits=settings.outcome_limits,
                                max_response_bytes=settings.provider_max_response_bytes)
        for name, ps in settings.providers.items()
    }


__all__ = ["JobSnapshot", "Provider", "ProviderSettings", "SubmitJob", "build_providers"]
