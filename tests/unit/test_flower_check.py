"""workers/flower_check.py: Flower refuses to start with missing, short or example credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.settings import ConfigError
from workers.flower_check import ENV_EXAMPLE, MIN_PASSWORD_LEN, check_basic_auth, example_passwords, main

STRONG = "admin:" + "Zq8-vT3pL0wX7rN2"  # 16 characters


def test_the_example_file_shows_a_password_that_is_refused() -> None:
    examples = example_passwords(ENV_EXAMPLE.read_text())
    assert examples, ".env.example should show FLOWER_BASIC_AUTH"
    for password in examples:
        with pytest.raises(ConfigError, match="FLOWER_BASIC_AUTH"):
            check_basic_auth("ops:" + password, examples)


@pytest.mark.parametrize(
    "value",
    ["", "   ", "admin", "admin:", ":" + "p" * 20, "admin:" + "p" * (MIN_PASSWORD_LEN - 1), f"{STRONG},other:short"],
)
def test_missing_malformed_or_short_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_basic_auth(value)
    message = str(info.value)
    assert "FLOWER_BASIC_AUTH" in message
    assert "p" * 15 not in message


def test_a_long_example_password_is_refused_too() -> None:
    example = "an-example-password-long-enough"
    with pytest.raises(ConfigError, match="example"):
        check_basic_auth("admin:" + example, {example})


def test_strong_credentials_pass() -> None:
    check_basic_auth(STRONG)
    check_basic_auth(f"{STRONG},second:{'k' * 24}")


def test_main_exits_nonzero_with_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = tmp_path / ".env.example"
    example.write_text("# FLOWER_BASIC_AUTH=admin:this-is-the-example-one\n")
    assert main({"FLOWER_BASIC_AUTH": "admin:this-is-the-example-one"}, example) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flower: ") and "this-is-the-example-one" not in err
    assert main({"FLOWER_BASIC_AUTH": "admin:change-me"}, example) == 1
    assert main({}, example) == 1
    capsys.readouterr()
    assert main({"FLOWER_BASIC_AUTH": STRONG}, example) == 0
    assert capsys.readouterr().err == ""


def test_procfile_runs_the_check_before_flower() -> None:
    line = next(ln for ln in (ENV_EXAMPLE.parent / "Procfile").read_text().splitlines() if ln.startswith("flower:"))
    check, _, rest = line.partition("&&")
    assert "python -m workers.flower_check" in check and "flower" in rest
