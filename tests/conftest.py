"""Whole-suite set-up: the order the files are handed out in.

``bin/test`` runs the files on four processes (pytest-xdist, ``--dist loadfile
--no-loadscope-reorder``), which take them in collection order. A long file taken last keeps one
process busy after the others have finished: the longest go first, so the short ones fill in
around them. The list is measured (the suite's per-file times, 2026-12-07, a few minutes each at
most); a file missing from it only runs later.
"""

from __future__ import annotations

import pytest

#: the longest files, longest first (tests/integration/...)
LONGEST_FIRST = (
    "test_broker_restart.py",
    "test_attacks_tarpit.py",
    "test_startup_errors.py",
    "test_first_hour.py",
    "test_channels.py",
    "test_fair_dispatch.py",
    "test_start_leases.py",
    "test_pgbouncer.py",
    "test_attacks_ssrf.py",
    "test_conformance.py",
    "test_installed_server.py",
    "test_limits.py",
    "test_tracing.py",
)
_RANK = {name: rank for rank, name in enumerate(LONGEST_FIRST)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: every process collects the same order, and a file's tests stay as written.
    items.sort(key=lambda item: _RANK.get(item.path.name, len(LONGEST_FIRST)))
