"""app.startup: the one line a process prints when it cannot start (no services needed here; the
entry points themselves run as subprocesses in tests/integration/test_startup_errors.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from flask.cli import cli as flask_cli
from sqlalchemy.exc import OperationalError

from app import create_app, startup


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://liaison:pw-7a1c@db.internal:5433/liaison", "db.internal:5433"),
        ("amqp://guest:pw-7a1c@rabbit.local:5672//", "rabbit.local:5672"),
        ("redis://:pw-7a1c@cache:6379/0", "cache:6379"),
        ("redis://cache/0", "cache"),
        ("sqlite:////srv/liaison/var/liaison.db", "/srv/liaison/var/liaison.db"),
        ("postgresql://u:pw-7a1c@db:notaport/x", "db"),
        ("sentinel://:pw-7a1c@s1:26379;sentinel://:pw-7a1c@s2:26380", "s1:26379, s2:26380"),
        ("amqp://u:pw-7a1c@r1:5672//; amqp://u:pw-7a1c@r2//", "r1:5672, r2"),
    ],
)
def test_where_names_the_host_never_the_credentials(url, shown):
    assert startup.where(url) == shown
    assert "pw-7a1c" not in startup.database_failure(url, OSError("refused"))


def test_reason_is_the_drivers_first_line_with_passwords_masked():
    exc = OperationalError(
        "SELECT 1",
        {},
        Exception("connection to postgresql://u:pw-7a1c@db/x failed password=pw-7a1c\n\tIs the server running?"),
    )
    line = startup.database_failure("postgresql://u:pw-7a1c@db:5432/x", exc)
    assert "\n" not in line and "pw-7a1c" not in line
    assert line.startswith("cannot use the database at db:5432 (DATABASE_URL): connection to postgresql://u:***@db/x")


def test_create_app_outside_the_cli_exits_with_one_line_naming_the_setting(monkeypatch, capsys):
    monkeypatch.setenv("LIAISON_PROVIDERS", "foo")
    with pytest.raises(SystemExit) as info:
        create_app()
    assert info.value.code == startup.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err == "liaison: configuration error: LIAISON_PROVIDER_FOO_BASE_URL is required for provider 'foo'\n"


def test_under_the_flask_command_a_bad_setting_stops_every_liaison_command_but_db(tmp_path):
    """The app still loads (so `db upgrade` can run); `clients list` says what is wrong, in one line."""
    env = {
        "LIAISON_PROVIDERS": "foo",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "LIAISON_VAR_DIR": str(tmp_path),
    }
    result = CliRunner().invoke(flask_cli, ["--app", "app", "liaison", "clients", "list"], env=env)
    assert result.exit_code == startup.EXIT_CONFIG
    assert result.output.strip() == (
        "liaison: configuration error: LIAISON_PROVIDER_FOO_BASE_URL is required for provider 'foo'"
    )
    assert "Traceback" not in result.output
    help_text = CliRunner().invoke(flask_cli, ["--app", "app", "liaison", "db", "--help"], env=env)
    assert help_text.exit_code == 0 and "upgrade" in help_text.output


def test_running_flask_cli_is_false_outside_the_flask_command():
    assert not startup.running_flask_cli()


def test_vendor_events_without_an_amqp_provider_says_so_and_exits(tmp_path):
    """The Procfile's vendor-events line is harmless where no provider speaks AMQP."""
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}", "LIAISON_VAR_DIR": str(tmp_path)}
    result = CliRunner().invoke(flask_cli, ["--app", "app", "liaison", "vendor-events"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "no amqp provider is configured (LIAISON_PROVIDER_<NAME>_KIND=amqp): nothing to consume"
    )


def test_channel_commands_without_a_channel_broker_says_so_and_exits(tmp_path):
    """The Procfile's channel-commands line is harmless where no domain app uses a broker."""
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}", "LIAISON_VAR_DIR": str(tmp_path)}
    result = CliRunner().invoke(flask_cli, ["--app", "app", "liaison", "channel-commands"], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "no channel broker is set (LIAISON_CHANNEL_AMQP_URL, LIAISON_CHANNEL_REDIS_URL): nothing to consume"
    )


def test_a_channel_redis_url_must_be_a_redis_url():
    from foundation.options import ConfigError
    from foundation.settings import Settings

    with pytest.raises(ConfigError, match="LIAISON_CHANNEL_REDIS_URL"):
        Settings.from_env({"LIAISON_CHANNEL_REDIS_URL": "http://127.0.0.1:6379"})
