"""A database error names its statement, never the values bound to it: those are a task's input, a
callback URL with its token, a secret's hash. Every engine the app makes is created with
``hide_parameters=True`` (models/db.py, app/startup.py, migrations/env.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from models.db import Database

ROOT = Path(__file__).resolve().parents[2]
SECRET = "https://hooks.example/cb?token=tok-5e1f9a"
#: the code that runs in production: every package but the tests and the benchmarks
APP_CODE = (
    "app",
    "core",
    "foundation",
    "models",
    "runtime",
    "service",
    "webhooks",
    "workers",
    "wire",
    "migrations",
    "simulator",
)


def test_a_database_error_does_not_show_its_bound_values(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'liaison.db'}")
    try:
        with db.transaction() as session:
            session.execute(text("CREATE TABLE t (url TEXT NOT NULL UNIQUE)"))
        with pytest.raises(DBAPIError) as info, db.transaction() as session:
            session.execute(text("INSERT INTO t (url) VALUES (:url), (:url)"), {"url": SECRET})
    finally:
        db.dispose()
    shown = str(info.value)
    assert "UNIQUE constraint failed" in shown and "INSERT INTO t" in shown
    assert "tok-5e1f9a" not in shown and "hidden" in shown  # SQLAlchemy's "[SQL parameters hidden ...]"


ENGINE_FACTORIES = ("create_engine", "engine_from_config")


def _engine_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in ENGINE_FACTORIES
    ]


def test_every_engine_the_app_creates_hides_its_parameters() -> None:
    calls = {
        f"{path.relative_to(ROOT)}:{call.lineno}": call
        for package in APP_CODE
        for path in sorted((ROOT / package).rglob("*.py"))
        for call in _engine_calls(path)
    }
    assert len(calls) >= 4, calls  # models/db.py (2), app/startup.py, migrations/env.py
    unhidden = [
        where
        for where, call in calls.items()
        if not any(
            k.arg == "hide_parameters" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )
    ]
    assert unhidden == []
