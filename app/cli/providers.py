"""Providers: ``liaison providers list`` (what ``GET /admin/v1/providers`` shows) and ``liaison
providers check NAME [--job JOB_ID]``: are this provider's settings and profile usable, and, given
a vendor job id, what does the vendor say of it, asked through the provider's adapter and shared
rate limit (the path every worker's status call takes).

``check`` reads the provider's own block even when another setting is wrong (the ``liaison`` group
lets this group run with a configuration error): a mistake is one line naming the variable, and for
a profile the file and the dotted key, exit 78; no traceback. Nothing here prints a secret."""

from __future__ import annotations

import os
from typing import Any

import click
from flask import current_app
from flask.cli import AppGroup

from app import startup
from app.api.provider_summary import provider_bodies, provider_body
from app.cli.output import echo_json, emit, emit_one, json_option
from core.errors import CallError
from foundation.option_reading import by_attr
from foundation.options import ConfigError
from foundation.provider_settings import ProviderSettings
from foundation.setting_table import OPTIONS
from runtime.context import liaison
from runtime.limiter import RateLimited
from webhooks.schemes import CONFIRM

#: What ``check`` exits with when the vendor could not be asked or its answer was refused.
EXIT_VENDOR = 1


def register(group: AppGroup) -> None:
    group.add_command(providers_group)


@click.group("providers", cls=AppGroup)
def providers_group() -> None:
    """The configured providers (LIAISON_PROVIDERS): list them, check one's settings, profile and vendor."""


def _configuration_error() -> str | None:
    return current_app.extensions.get("liaison_config_error")


@providers_group.command("list")
@json_option
def providers_list(as_json: bool) -> None:
    """Each provider's kind, webhook scheme, profile, poll schedule and limits (never a secret)."""
    error = _configuration_error()
    if error:
        startup.fail(f"configuration error: {error}", startup.EXIT_CONFIG)
    settings = liaison().settings
    rows = provider_bodies(settings.providers, settings.default_provider)
    columns = ("name", "kind", "webhook_scheme", "profile", "poll_schedule_s", "max_in_flight", "rate_limit_per_s")
    emit(rows, columns, as_json, empty="no provider configured (LIAISON_PROVIDERS)")


def _configured_names() -> tuple[str, ...]:
    option = by_attr(OPTIONS)["provider_names"]
    try:
        return tuple(option.read(os.environ, {}, ""))
    except ConfigError as exc:
        startup.fail(f"configuration error: {exc}", startup.EXIT_CONFIG)


def _provider(name: str) -> ProviderSettings:
    """The provider's settings as the platform reads them, or one line saying what is wrong. With a
    configuration error elsewhere the app holds no providers: the environment is read again."""
    error = _configuration_error()
    names = _configured_names() if error else tuple(liaison().settings.providers)
    if name not in names:
        startup.fail(f"unknown provider {name!r} (LIAISON_PROVIDERS: {', '.join(names) or 'none'})", 1)
    if error is None:
        return liaison().settings.providers[name]
    try:  # its own block first: that is what the operator is checking
        ProviderSettings.from_env(os.environ, name)
    except ConfigError as exc:
        startup.fail(f"configuration error: {exc}", startup.EXIT_CONFIG)
    startup.fail(f"provider {name!r} reads fine, but another setting is wrong: {error}", startup.EXIT_CONFIG)


def notes(ps: ProviderSettings) -> list[str]:
    """What is allowed but likely not meant (a check still passes)."""
    found = []
    if ps.webhook_scheme == CONFIRM and not ps.poll_schedule_s:
        found.append(
            "WEBHOOK_SCHEME=confirm without POLL_SCHEDULE_S: a hint that overtakes the submit's answer waits "
            "for reconciliation (RECONCILE_AFTER_S)"
        )
    profile = ps.vendor_profile
    if profile is not None and profile.events is None and ps.webhook_scheme != CONFIRM:
        found.append("the profile has no [events]: its webhooks must be Liaison's own event shape (design §5)")
    return found


def _ask(name: str, job_id: str) -> dict[str, Any]:
    """The vendor's word on one job, through the provider's adapter and shared rate limit."""
    provider = liaison().providers[name]
    try:
        snapshot = provider.status(job_id)
    except (CallError, RateLimited) as exc:
        startup.fail(f"provider {name!r}: status of job {job_id!r}: {type(exc).__name__}: {exc}", EXIT_VENDOR)
    return {
        "job_id": snapshot.job_id,
        "vendor_status": snapshot.vendor_status or snapshot.status,
        "state": snapshot.status,
        "outcome": snapshot.outcome,
    }


@providers_group.command("check")
@click.argument("name")
@click.option("--job", "job_id", help="A vendor job id: ask the vendor its status, and show what it maps to.")
@json_option
def providers_check(name: str, job_id: str | None, as_json: bool) -> None:
    """Check a provider's settings and profile (exit 78 naming the variable, file and key of a
    mistake); with --job, ask the vendor for that job's status through the provider's adapter."""
    ps = _provider(name)
    settings = liaison().settings
    summary = provider_body(ps, default=name == settings.default_provider)
    found = notes(ps)
    job = _ask(name, job_id) if job_id is not None else None
    if as_json:
        echo_json({"ok": True, "provider": summary, "notes": found, "job": job})
        return
    click.echo(f"provider {name}: settings{' and profile' if ps.vendor_profile else ''} OK")
    emit_one({k: v for k, v in summary.items() if k != "name"}, False)
    for note in found:
        click.echo(f"note: {note}")
    if job is not None:
        click.echo(f"job {job['job_id']}: vendor status {job['vendor_status']!r} -> {job['state']}")
        if job["outcome"] is not None:
            emit_one({"outcome": job["outcome"]}, False)
