"""The per-app objects (settings, store, engine) and how views reach them.

They hang off ``app.extensions`` rather than module globals, so two apps in one process (two
simulators in one test) never share jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import current_app

from simulator.engine import Engine
from simulator.settings import Settings
from simulator.store import Store

if TYPE_CHECKING:
    from simulator.broker import BrokerVendor

EXTENSION_KEY = "simulator"


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    store: Store
    engine: Engine
    broker: BrokerVendor | None = None  # broker mode (SIMULATOR_AMQP_URL): the command consumer


def runtime() -> Runtime:
    """The current app's runtime (inside a request)."""
    return current_app.extensions[EXTENSION_KEY]
