"""Files that hold secrets are owner-only (0600) from the moment they exist, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from app.demo import write_env_file
from foundation.settings import Settings
from models.db import Database, ensure_private_sqlite_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_umask():
    old = os.umask(0o022)  # the usual default: files world-readable
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_demo_env_file_is_created_0600(tmp_path: Path, open_umask: None) -> None:
    path = write_env_file(tmp_path / "var" / "demo.env")
    assert _mode(path) == 0o600
    content = path.read_text()
    assert "LIAISON_ADMIN_TOKEN=" in content and "FLOWER_BASIC_AUTH=admin:" in content
    # kept as it is on the next run (same secrets), and an older, looser file is tightened
    path.chmod(0o644)
    assert write_env_file(path).read_text() == content and _mode(path) == 0o600


def test_bin_demo_writes_its_env_file_through_it() -> None:
    script = (Path(__file__).resolve().parents[2] / "bin" / "demo").read_text()
    assert "write_env_file" in script and '> "$envfile"' not in script


def test_sqlite_file_and_its_wal_are_created_0600(tmp_path: Path, open_umask: None) -> None:
    db = Database(f"sqlite:///{tmp_path / 'data' / 'liaison.db'}")
    try:
        with db.transaction() as session:
            session.execute(text("CREATE TABLE t (x INTEGER)"))
            session.execute(text("INSERT INTO t VALUES (1)"))
        files = sorted((tmp_path / "data").iterdir())
        assert next(f.name for f in files) == "liaison.db" and len(files) >= 2  # -wal/-shm too (WAL mode)
        for f in files:
            assert _mode(f) == 0o600, f.name
    finally:
        db.dispose()


def test_an_existing_sqlite_file_is_tightened(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "old.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    assert ensure_private_sqlite_file(f"sqlite:///{path}") == path and _mode(path) == 0o600
    assert ensure_private_sqlite_file("postgresql+psycopg://u:p@h/db") is None
    assert ensure_private_sqlite_file("sqlite://") is None and ensure_private_sqlite_file("sqlite:///:memory:") is None


def test_migrations_create_the_sqlite_file_0600(tmp_path: Path, open_umask: None) -> None:
    from alembic import command

    from app.cli import alembic_config

    path = tmp_path / "migrated" / "liaison.db"
    command.upgrade(alembic_config(f"sqlite:///{path}"), "head")
    assert _mode(path) == 0o600


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_the_demo_env_file_connects_three_vendors_the_settings_accept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bin/demo's vendors: Liaison's own, a Stripe-shaped one through the shipped profile, a polled one."""
    env = _read_env(write_env_file(tmp_path / "demo.env"))
    monkeypatch.chdir(ROOT)  # bin/demo runs there: the profile's path is relative to the checkout
    settings = Settings.from_env({**env, "LIAISON_VAR_DIR": str(tmp_path)})
    assert list(settings.providers) == ["simulator", "stripe", "polled"] and settings.default_provider == "simulator"
    stripe, polled = settings.providers["stripe"], settings.providers["polled"]
    assert (stripe.kind, stripe.webhook_scheme, stripe.vendor_profile is not None) == ("http", "stripe", True)
    assert stripe.webhook_secrets == (env["SIMULATOR_STRIPE_WEBHOOK_SECRET"],)
    assert (polled.kind, polled.webhook_scheme, polled.poll_schedule_s) == ("rest", "confirm", (1.0, 2.0))


def test_an_older_demo_env_file_keeps_its_secrets_and_gains_the_new_vendors(tmp_path: Path) -> None:
    path = tmp_path / "demo.env"
    old = [
        "LIAISON_PROVIDERS=simulator",
        "LIAISON_PROVIDER_SIMULATOR_BASE_URL=http://127.0.0.1:5001",
        "LIAISON_PROVIDER_SIMULATOR_WEBHOOK_SECRETS=whsec_b2xkLXNlY3JldA==",
        "SIMULATOR_WEBHOOK_SECRET=whsec_b2xkLXNlY3JldA==",
        "LIAISON_ADMIN_TOKEN=old-admin-token",
    ]
    path.write_text("\n".join(old) + "\n")
    env = _read_env(write_env_file(path))
    assert env["LIAISON_PROVIDERS"] == "simulator,stripe,polled"
    assert (
        env["SIMULATOR_WEBHOOK_SECRET"] == "whsec_b2xkLXNlY3JldA==" and env["LIAISON_ADMIN_TOKEN"] == "old-admin-token"
    )
    assert env["LIAISON_PROVIDER_STRIPE_KIND"] == "http" and "LIAISON_METRICS_TOKEN" in env
    assert _mode(path) == 0o600
    text = path.read_text()
    assert write_env_file(path).read_text() == text  # complete now: left as it is
