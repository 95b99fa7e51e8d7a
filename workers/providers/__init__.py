"""External systems: the adapters that speak to real vendors (``rest``, ``amqp``, ``http``;
``plugin``: an adapter written in Python), each behind the shared rate limit (``limited``). The
contract they keep, the Provider protocol, is ``runtime.provider``.

Callers import :func:`adapter` / ``build_providers`` (the composition root builds one per configured
provider) and the protocol's types; an adapter's own module is for its tests."""

from __future__ import annotations

from collections.abc import Callable

from core.rate_limit import Limit
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings
from runtime.limiter import Limiter
from runtime.provider import JobSnapshot, Provider, SubmitJob
from workers.providers import plugin
from workers.providers.amqp import AmqpProvider
from workers.providers.http_profile import HttpProfileProvider
from workers.providers.limited import RateLimitedProvider
from workers.providers.rest import RestProvider


def _amqp(settings: Settings, ps: ProviderSettings) -> Provider:
    return AmqpProvider(
        ps,
        outcome_limits=settings.outcome_limits,
        max_response_bytes=settings.provider_max_response_bytes,
        tolerance_s=settings.webhook_tolerance_s,
        queue_type=settings.rabbitmq_queue_type,
    )


def _rest(settings: Settings, ps: ProviderSettings) -> Provider:
    return RestProvider(
        ps,
        webhook_url=f"{settings.public_url}/webhooks/{ps.name}",
        outcome_limits=settings.outcome_limits,
        max_response_bytes=settings.provider_max_response_bytes,
    )


def _http(settings: Settings, ps: ProviderSettings) -> Provider:
    assert ps.vendor_profile is not None  # required for kind http (foundation.provider_setting_table)
    return HttpProfileProvider(
        ps,
        ps.vendor_profile,
        webhook_url=f"{settings.public_url}/webhooks/{ps.name}",
        outcome_limits=settings.outcome_limits,
        max_response_bytes=settings.provider_max_response_bytes,
    )


def _plugin(settings: Settings, ps: ProviderSettings) -> Provider:
    return plugin.build(
        ps,
        webhook_url=f"{settings.public_url}/webhooks/{ps.name}",
        max_response_bytes=settings.provider_max_response_bytes,
        guard=settings.outbound_allow,
        outcome_limits=settings.outcome_limits,
    )


#: One builder per ``LIAISON_PROVIDER_<NAME>_KIND``.
ADAPTERS: dict[str, Callable[[Settings, ProviderSettings], Provider]] = {
    "rest": _rest,
    "amqp": _amqp,
    "http": _http,
    "plugin": _plugin,
}


def adapter(settings: Settings, ps: ProviderSettings) -> Provider:
    """The adapter of a provider's kind: rest and http call back our webhook URL, amqp our reply queue."""
    return ADAPTERS[ps.kind](settings, ps)


def build_providers(settings: Settings, limiter: Limiter) -> dict[str, Provider]:
    """One adapter per configured provider, behind its shared rate limit."""
    return {
        name: RateLimitedProvider(
            adapter(settings, ps),
            limiter,
            Limit(ps.rate_limit_per_s, ps.rate_limit_burst),
            max_wait_s=settings.provider_rate_max_wait_s,
        )
        for name, ps in settings.providers.items()
    }


__all__ = [
    "AmqpProvider",
    "HttpProfileProvider",
    "JobSnapshot",
    "Provider",
    "ProviderSettings",
    "RateLimitedProvider",
    "SubmitJob",
    "build_providers",
]
