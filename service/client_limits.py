"""A client's own limits (issue 8: submit rate, burst, open tasks) and dispatch terms (issue 20:
weight, default priority, concurrency-key limit), kept on its row, in the caller's transaction.
The limits override the deployment's ``LIAISON_CLIENT_*`` defaults where set; the CLI's
``clients limits`` changes and shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from foundation.settings import Settings
from models.client import Client

#: the limits a client may override; None on its row means the deployment's default applies
OVERRIDABLE = ("submit_rate_per_s", "submit_burst", "max_open_tasks")


@dataclass(frozen=True)
class LimitsChange:
    """What to change; None leaves a value as it is. ``reset`` drops the overrides first (the
    dispatch terms stay)."""

    submit_rate_per_s: float | None = None
    submit_burst: int | None = None
    max_open_tasks: int | None = None
    weight: int | None = None
    default_priority: int | None = None
    concurrency_key_limit: int | None = None
    reset: bool = False


def change_limits(client: Client, change: LimitsChange) -> None:
    if change.reset:
        client.submit_rate_per_s = client.submit_burst = client.max_open_tasks = None
    for attr in (*OVERRIDABLE, "weight", "default_priority", "concurrency_key_limit"):
        value = getattr(change, attr)
        if value is not None:
            setattr(client, attr, value)


def limits(client: Client, settings: Settings) -> dict[str, Any]:
    """The limits that apply to the client (its overrides, else the defaults), which of them are
    its own, and its dispatch terms."""
    return {
        "submit_rate_per_s": client.submit_rate_per_s
        if client.submit_rate_per_s is not None
        else settings.client_submit_rate_per_s,
        "submit_burst": client.submit_burst if client.submit_burst is not None else settings.client_submit_burst,
        "max_open_tasks": client.max_open_tasks
        if client.max_open_tasks is not None
        else settings.client_max_open_tasks,
        "overridden": [k for k in OVERRIDABLE if getattr(client, k) is not None],
        "weight": client.weight,
        "default_priority": client.default_priority,
        "concurrency_key_limit": client.concurrency_key_limit,
    }
