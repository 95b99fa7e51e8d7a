"""The whole Flask app in-process for middle tests: on a copy of the migrated SQLite template, with a
vendor address nothing listens on (no call leaves the machine; none is made in these tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

from flask import Flask

from app import create_app
from foundation.settings import Settings
from webhooks.signing import generate_secret


def in_process_app(template: Path, tmp_path: Path, **env: str) -> Flask:
    """``env`` adds to (or overrides) the base settings, e.g. ``LIAISON_ADMIN_TOKEN``."""
    path = tmp_path / "liaison.db"
    shutil.copyfile(template, path)
    base = {
        "DATABASE_URL": f"sqlite:///{path}",
        "LIAISON_VAR_DIR": str(tmp_path),
        "LIAISON_PROVIDERS": "sim",
        "LIAISON_PROVIDER_SIM_BASE_URL": "http://127.0.0.1:9",
        "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": generate_secret(),
        "LIAISON_LOG_LEVEL": "warning",
    }
    return create_app(Settings.from_env({**base, **env}))
