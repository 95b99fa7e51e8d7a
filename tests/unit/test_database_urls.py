"""DATABASE_URL as platforms hand it out: ``postgres://`` and ``postgresql://`` run on psycopg 3,
anything else is one line naming the setting (never the password), and a SQLite file whose folder
does not exist is refused rather than made (foundation/database_urls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.config import main as alembic_main
from click.testing import CliRunner
from flask.cli import cli as flask_cli

from app import create_app, startup
from foundation.database_urls import normalise_database_url, sqlite_file
from foundation.options import ConfigError
from foundation.settings import Settings, database_url_from_env

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-51c0de"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgres://u:{PASSWORD}@db.host:5432/app", f"postgresql+psycopg://u:{PASSWORD}@db.host:5432/app"),
        (f"postgresql://u:{PASSWORD}@db.host/app", f"postgresql+psycopg://u:{PASSWORD}@db.host/app"),
        ("POSTGRES://u@db.host/app?sslmode=require", "postgresql+psycopg://u@db.host/app?sslmode=require"),
        ("postgresql+psycopg://u@db.host/app", "postgresql+psycopg://u@db.host/app"),
        ("postgresql:///app", "postgresql+psycopg:///app"),  # a Unix socket
        ("sqlite:///relative.db", "sqlite:///relative.db"),  # in the working directory
        ("sqlite://", "sqlite://"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
    ],
)
def test_platform_urls_map_to_the_driver_liaison_uses(url: str, expected: str) -> None:
    assert normalise_database_url("DATABASE_URL", url) == expected
    assert Settings.from_env({"DATABASE_URL": url}).database_url == expected
    assert database_url_from_env({"DATABASE_URL": url}) == expected


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://u:{PASSWORD}@db.host/app",
        f"postgresql+psycopg2://u:{PASSWORD}@db.host/app",
        f"u:{PASSWORD}@db.host/app",
        f"postgres://u:{PASSWORD}@db.host:port/app",
        f"postgres://u:{PASSWORD}@[::1/app",
        "sqlite://somehost/x.db",
        "not a url",
    ],
)
def test_any_other_url_is_one_line_naming_the_setting(url: str) -> None:
    for read in (
        lambda: database_url_from_env({"DATABASE_URL": url}),
        lambda: Settings.from_env({"DATABASE_URL": url}),
    ):
        with pytest.raises(ConfigError) as info:
            read()
        message = str(info.value)
        assert message.startswith("DATABASE_URL") and "\n" not in message
        assert PASSWORD not in message and url not in message


def test_a_postgres_lookalike_scheme_names_the_driver() -> None:
    with pytest.raises(ConfigError, match=r"psycopg 3: postgresql\+psycopg://"):
        normalise_database_url("DATABASE_URL", "postgresql+asyncpg://u@h/db")


def test_a_sqlite_file_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo' / 'liaison.db'}"
    for read in (database_url_from_env, Settings.from_env):
        with pytest.raises(ConfigError, match=r"^DATABASE_URL: the folder .*typo of the SQLite file does not exist"):
            read({"DATABASE_URL": url})
    assert not (tmp_path / "typo").exists()
    (tmp_path / "typo").mkdir()
    assert Settings.from_env({"DATABASE_URL": url}).database_url == url


def test_the_default_file_may_wait_for_its_var_dir(tmp_path: Path) -> None:
    """Nothing set: the file lives in LIAISON_VAR_DIR, which Liaison makes itself."""
    env = {"LIAISON_VAR_DIR": str(tmp_path / "var")}
    assert Settings.from_env(env).database_url == f"sqlite:///{tmp_path / 'var' / 'liaison.db'}"
    assert database_url_from_env(env) == f"sqlite:///{tmp_path / 'var' / 'liaison.db'}"


def test_sqlite_file_is_the_path_sqlite_opens() -> None:
    assert sqlite_file("sqlite:///var/x.db") == Path("var/x.db")
    assert sqlite_file("sqlite:////srv/x.db?mode=ro") == Path("/srv/x.db")
    for url in ("sqlite://", "sqlite:///:memory:", "sqlite:///file:x?uri=true", "postgresql+psycopg://h/db"):
        assert sqlite_file(url) is None


def test_create_app_with_a_bad_database_url_exits_with_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("DATABASE_URL", f"postgres://u:{PASSWORD}@db.host:nope/app")
    with pytest.raises(SystemExit) as info:
        create_app()
    assert info.value.code == startup.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err == "liaison: configuration error: DATABASE_URL is not a valid URL (check its host and port)\n"


@pytest.mark.parametrize("url", [f"mysql://u:{PASSWORD}@db.host/app", "sqlite:///{tmp}/missing/liaison.db"])
def test_db_upgrade_with_a_bad_database_url_is_one_line(url: str, tmp_path: Path) -> None:
    """`liaison db upgrade` runs on DATABASE_URL alone: a bad one stops it too, in one line."""
    env = {"DATABASE_URL": url.format(tmp=tmp_path), "LIAISON_VAR_DIR": str(tmp_path), "LIAISON_PROVIDERS": "foo"}
    result = CliRunner().invoke(flask_cli, ["--app", "app", "liaison", "db", "upgrade"], env=env)
    assert result.exit_code == startup.EXIT_CONFIG, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("liaison: configuration error: DATABASE_URL")
    assert PASSWORD not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "missing").exists()


def test_alembic_run_directly_with_a_bad_database_url_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("DATABASE_URL", f"mysql://u:{PASSWORD}@db.host/app")
    with pytest.raises(SystemExit) as info:
        alembic_main(["-c", str(ROOT / "alembic.ini"), "upgrade", "head"])
    assert info.value.code == startup.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("liaison: configuration error: DATABASE_URL must be")
    assert PASSWORD not in err


#: passwords a person might paste as they are: each holds a character a URL reserves
RAW_PASSWORDS = ["p@ss-51c0de", "pw#51c0de", "pw?51c0de", "pw/51c0de", "a@b#c-51c0de"]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg"])
def test_a_raw_reserved_character_in_the_password_is_refused_in_one_line(scheme: str, password: str) -> None:
    """SQLAlchemy reads ``app:p@ss@db`` as the password ``p`` at the host ``ss@db`` (whose name the
    driver's error then shows), and a masked display hid only ``p``: refused, never guessed at."""
    url = f"{scheme}://app:{password}@127.0.0.1:5432/liaison"
    for read in (
        lambda: normalise_database_url("DATABASE_URL", url),
        lambda: database_url_from_env({"DATABASE_URL": url}),
        lambda: Settings.from_env({"DATABASE_URL": url}),
    ):
        with pytest.raises(ConfigError) as info:
            read()
        message = str(info.value)
        assert message.startswith("DATABASE_URL has a raw @, #, / or ? in its user name or password")
        assert "percent-encode" in message and "%40" in message and "\n" not in message
        assert "51c0de" not in message and "127.0.0.1" not in message


@pytest.mark.parametrize("password", RAW_PASSWORDS)
def test_the_same_password_percent_encoded_is_taken_and_read_whole(password: str) -> None:
    from urllib.parse import quote

    from sqlalchemy.engine import make_url

    url = Settings.from_env({"DATABASE_URL": f"postgresql://app:{quote(password, safe='')}@127.0.0.1/x"}).database_url
    parsed = make_url(url)
    assert (parsed.password, parsed.host, parsed.database) == (password, "127.0.0.1", "x")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app@127.0.0.1/liaison?application_name=liaison",
        "postgresql://127.0.0.1/liaison",
        "postgresql://app:p:w%40x@[::1]:5432/liaison",  # a colon in a password is unambiguous
        "sqlite:///folder@host/x.db",  # a SQLite path has no user name, an @ in it is a file name
    ],
)
def test_unambiguous_urls_are_not_refused(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder@host").mkdir()
    assert Settings.from_env({"DATABASE_URL": url}).database_url.endswith(url.split("://", 1)[1])
