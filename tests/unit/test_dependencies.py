"""The dependency pins agree with each other: ``pyproject.toml`` declares the same runtime pins as
``requirements.txt`` (what ``bin/_venv.sh`` installs), and ``constraints.txt`` (which pins every
transitive dependency) pins each of them, and the static checkers, at the very same version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)$")


def _requirements(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-r")]


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = PIN.match(line)
        assert match, f"not an exact pin: {line!r}"
        pins[_name(match[1])] = match[2]
    return pins


def test_pyproject_declares_the_runtime_requirements() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert declared == _requirements(ROOT / "requirements.txt")


def test_constraints_pin_every_direct_requirement_at_its_version() -> None:
    constraints = _pins(_requirements(ROOT / "constraints.txt"))
    direct = _pins(_requirements(ROOT / "requirements.txt") + _requirements(ROOT / "requirements-dev.txt"))
    assert {name: constraints.get(name) for name in direct} == direct
    assert "liaison" not in constraints  # the project itself is never a constraint


def test_the_venv_script_installs_with_the_constraints() -> None:
    script = (ROOT / "bin" / "_venv.sh").read_text()
    assert "-c constraints.txt" in script
    assert "constraints.txt" in script.split("want=", 1)[1].splitlines()[0]  # a change re-installs
