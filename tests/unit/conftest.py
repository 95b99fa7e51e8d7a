"""Shared set-up for the pure-core unit tests: fast, reproducible hypothesis settings.

Run the property tests harder with ``HYPOTHESIS_PROFILE=thorough .venv/bin/pytest -q tests/unit``.
"""

from __future__ import annotations

import os

from hypothesis import settings

# Pure functions, but the first example can be slow while modules warm up: no per-example deadline.
# No example database, so runs do not depend on earlier failures stored on disk.
settings.register_profile("liaison-unit", deadline=None, max_examples=60, database=None)
settings.register_profile("thorough", deadline=None, max_examples=2000, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "liaison-unit"))
