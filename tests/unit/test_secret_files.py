"""Files that hold secrets are owner-only (0600) from the moment they exist, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from app.demo import write_env_file
from models.db import Database, ensure_private_sqlite_file


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
