"""The per-app objects (settings, store, engine) and how views reach them.

They hang off ``app.extensions`` rather than module globals, so two apps in one process (two
simulators in one test) never share jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from simulator.engine import Engine
from simulator.settings import Settings
from simulator.store import Store

EXTENSION_KEY = "simulator"


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    store: Store
    engine: Engine


def runtime() -> Runtime:
    """The current app's runtime (inside a request)."""
    return current_app.extensions[EXTENSION_KEY]
