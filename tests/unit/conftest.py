"""Shared set-up for the pure-core unit tests: repo root importable, quiet hypothesis settings."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings

# No project-wide pytest config exists; make the repo root importable (models, webhooks, app, workers).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# Pure functions, but the first example can be slow while modules warm up: no per-example deadline.
# No example database: the suite must not write outside tests/ (and stays reproducible per seed).
settings.register_profile("liaison-unit", deadline=None, max_examples=100, database=None)
settings.load_profile("liaison-unit")
