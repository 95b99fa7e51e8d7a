"""Shared set-up for the pure-core unit tests: fast, reproducible hypothesis settings.

Run the property tests harder with ``HYPOTHESIS_PROFILE=thorough .venv/bin/pytest -q tests/unit``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Pure functions, but the first example can be slow while modules warm up, and a loaded CI machine
# slows every example: no per-example deadline and no "too slow" health check (both are clocks, and
# the suite counts instead of timing). No example database, so runs do not depend on earlier
# failures stored on disk.
settings.register_profile(
    "liaison-unit", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60, database=None
)
settings.register_profile("thorough", parent=settings.get_profile("liaison-unit"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "liaison-unit"))
