"""One provider's settings (``LIAISON_PROVIDER_<NAME>_*``), a frozen object per name in
``LIAISON_PROVIDERS``: read off the rows of ``foundation.provider_setting_table`` with that name put
in, its defaults the table's. Apart from ``foundation.settings`` because the providers' adapters,
policies and validation need only this object, and ``Settings`` holds one of these per provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, ClassVar

from foundation.option_reading import by_attr, masked_repr, read_options, secret_attrs
from foundation.options import Option
from foundation.provider_setting_table import PROVIDER_OPTIONS, PROVIDER_PREFIX
from webhooks.events import EventParser, parser_for
from webhooks.schemes import EventIdSource, HmacParams, Profile
from wire.profiles import VendorProfile


def _provider_default(attr: str) -> Any:
    option = by_attr(PROVIDER_OPTIONS)[attr]
    return option.parser.convert(option.env, option.default)


@dataclass(frozen=True, repr=False)
class ProviderSettings:
    """One external system, named in configuration (``LIAISON_PROVIDER_<NAME>_*``); the meaning
    and default of each field are in ``PROVIDER_OPTIONS``."""

    __repr__ = masked_repr
    _secret: ClassVar[frozenset[str]] = secret_attrs(PROVIDER_OPTIONS)

    name: str
    kind: str
    base_url: str
    webhook_secrets: tuple[str, ...]
    vendor_profile: VendorProfile | None = None  # kind http (wire.profiles)
    connect_timeout_s: float = _provider_default("connect_timeout_s")
    read_timeout_s: float = _provider_default("read_timeout_s")
    api_key: str = _provider_default("api_key")
    acceptance_timeout_s: int | None = _provider_default("acceptance_timeout_s")
    execution_timeout_s: int | None = _provider_default("execution_timeout_s")
    heartbeat_timeout_s: int | None = _provider_default("heartbeat_timeout_s")
    submit_max_attempts: int = _provider_default("submit_max_attempts")
    submit_backoff_base_s: float = _provider_default("submit_backoff_base_s")
    submit_backoff_cap_s: float = _provider_default("submit_backoff_cap_s")
    submit_max_total_s: float = _provider_default("submit_max_total_s")
    reconcile_after_s: int = _provider_default("reconcile_after_s")
    rate_limit_per_s: float = _provider_default("rate_limit_per_s")
    rate_limit_burst: int = _provider_default("rate_limit_burst")
    max_in_flight: int = _provider_default("max_in_flight")
    max_concurrent_calls: int | None = _provider_default("max_concurrent_calls")
    call_deadline_s: float = _provider_default("call_deadline_s")
    poll_schedule_s: tuple[float, ...] | None = _provider_default("poll_schedule_s")
    amqp_url: str = _provider_default("amqp_url")
    command_queue: str = _provider_default("command_queue")
    reply_queue: str = _provider_default("reply_queue")
    webhook_scheme: str = _provider_default("webhook_scheme")
    webhook_event_id: EventIdSource | None = None  # the scheme's default (webhooks.schemes.DEFAULT_EVENT_ID)
    webhook_hmac_header: str = _provider_default("webhook_hmac_header")
    webhook_hmac_algorithm: str = _provider_default("webhook_hmac_algorithm")
    webhook_hmac_encoding: str = _provider_default("webhook_hmac_encoding")
    webhook_hmac_prefix: str = _provider_default("webhook_hmac_prefix")
    webhook_hmac_signed_content: str = _provider_default("webhook_hmac_signed_content")
    webhook_hmac_separator: str = _provider_default("webhook_hmac_separator")
    webhook_hmac_timestamp_header: str = _provider_default("webhook_hmac_timestamp_header")

    def inbound_profile(self, tolerance_s: int) -> Profile:
        """What ``webhooks.schemes.verify`` needs to check this provider's events."""
        params = HmacParams(
            self.webhook_hmac_header,
            self.webhook_hmac_algorithm,
            self.webhook_hmac_encoding,
            self.webhook_hmac_prefix,
            self.webhook_hmac_timestamp_header,
            self.webhook_hmac_signed_content,
            self.webhook_hmac_separator,
        )
        return Profile(self.webhook_scheme, self.webhook_secrets, params, self.webhook_event_id, tolerance_s)

    @cached_property
    def event_parser(self) -> EventParser:
        """How this provider's event bodies are read: its profile's ``[events]``, else Liaison's shape."""
        return parser_for(self.vendor_profile)

    @property
    def hint_job_pointer(self) -> str | None:
        """Where a ``confirm`` hint names its job: the profile's ``events.job_id``, else the event
        shape's (None: ``webhooks.schemes.hint_job_id``'s default)."""
        events = self.vendor_profile.events if self.vendor_profile is not None else None
        return events.job_id if events is not None else None

    @staticmethod
    def options_for(name: str) -> tuple[Option, ...]:
        """PROVIDER_OPTIONS with this provider's variable names."""
        prefix = f"LIAISON_PROVIDER_{name.upper()}_"
        return tuple(replace(o, env=o.env.replace(PROVIDER_PREFIX, prefix)) for o in PROVIDER_OPTIONS)

    @classmethod
    def from_env(cls, env: Mapping[str, str], name: str) -> ProviderSettings:
        """One provider's block (what is required depends on its kind: a rest vendor's base URL, an
        amqp vendor's broker URL); an amqp vendor's queues default to names made from its own."""
        values = read_options(env, cls.options_for(name), f" for provider {name!r}")
        values["webhook_secrets"] = values["webhook_secrets"] or ()
        if values["kind"] == "amqp":
            values["command_queue"] = values["command_queue"] or f"{name}.commands"
            values["reply_queue"] = values["reply_queue"] or f"liaison.{name}.events"
        return cls(name=name, **values)
