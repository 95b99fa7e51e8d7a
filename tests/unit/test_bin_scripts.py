"""``bin/demo``, ``bin/test``, ``bin/services``, ``bin/chaos``, ``bin/cluster-sim``, ``bin/setup-browser`` and
``bin/lock`` answer ``--help`` (and ``-h``) with their usage and do nothing else; and everything the demo starts
listens on loopback only.

Nothing else is proved by running each script from a copy of ``bin/`` alone (no .venv, no
requirements) with an empty PATH: any command beyond bash's builtins (python3, mkdir, pg_ctlcluster,
even dirname) would fail, and the copy's folder must be as it was."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("demo", "test", "services", "chaos", "cluster-sim", "setup-browser", "lock")
BASH = shutil.which("bash") or "/bin/bash"


def _tree(base: Path) -> set[str]:
    return {str(p.relative_to(base)) for p in base.rglob("*")}


@pytest.fixture
def bare_copy(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    for name in (*SCRIPTS, "_venv.sh"):
        shutil.copy(ROOT / "bin" / name, tmp_path / "bin" / name)
    (tmp_path / "empty-path").mkdir()
    return tmp_path


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_usage_and_does_nothing_else(script: str, flag: str, bare_copy: Path) -> None:
    before = _tree(bare_copy)
    result = subprocess.run(
        [BASH, str(bare_copy / "bin" / script), flag],
        cwd=bare_copy,
        env={"PATH": str(bare_copy / "empty-path"), "HOME": str(bare_copy)},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(f"usage: bin/{script}")
    assert len(result.stdout.splitlines()) <= 15  # short
    assert _tree(bare_copy) == before  # no .venv, no var/, nothing


@pytest.mark.parametrize("script", ["demo", "services", "setup-browser", "lock"])
def test_an_unknown_argument_is_refused_with_the_usage(script: str, bare_copy: Path) -> None:
    result = subprocess.run(
        [BASH, str(bare_copy / "bin" / script), "--frobnicate"],
        cwd=bare_copy,
        env={"PATH": str(bare_copy / "empty-path")},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"usage: bin/{script}")


@pytest.mark.parametrize(("script", "package", "least"), [("chaos", "chaos", 7), ("cluster-sim", "cluster", 8)])
def test_the_usage_names_every_option_of_its_parser(script: str, package: str, least: int) -> None:
    """bin/chaos and bin/cluster-sim say their options in bash (so ``--help`` builds no .venv): each of
    their parser's (bench/<package>/cli.py)."""
    options = set(re.findall(r"add_argument\(\s*\"(--[a-z-]+)\"", (ROOT / "bench" / package / "cli.py").read_text()))
    assert len(options) >= least
    usage = (ROOT / "bin" / script).read_text().split("usage()", 1)[1].split("\n}", 1)[0]
    assert {option for option in options if option not in usage} == set()


def _expand(text: str, env: dict[str, str]) -> str:
    """The shell's ``${NAME:-default}``, innermost first."""
    pattern = re.compile(r"\$\{(\w+):-([^{}]*)\}")
    while (expanded := pattern.sub(lambda m: env.get(m[1]) or m[2], text)) != text:
        text = expanded
    return text


def test_everything_the_demo_starts_listens_on_loopback() -> None:
    demo = (ROOT / "bin" / "demo").read_text()
    exports = {
        name: value.strip('"')
        for line in re.findall(r"^export (.*?)(?:\s+#.*)?$", demo, re.MULTILINE)
        for name, value in (pair.split("=", 1) for pair in line.split())
    }
    procfile = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ": " in line)
    (started,) = re.findall(r"honcho -f Procfile .* start ([\w -]+?) >", demo)
    assert started.split() == ["web", "worker", "calls", "relay", "beat", "flower", "vendor"]
    listeners = {}
    for name in started.split():
        for address in re.findall(r"--bind[ =](\S+)|--address=(\S+)", procfile[name]):
            listeners[name] = _expand("".join(address), exports).rsplit(":", 1)[0]
    assert listeners == {"web": "127.0.0.1", "flower": "127.0.0.1", "vendor": "127.0.0.1"}
    # The demo's other vendors (Procfile.demo, a honcho of their own) listen on loopback too, on ports
    # the demo checks are free first.
    demo_only = dict(line.split(": ", 1) for line in (ROOT / "Procfile.demo").read_text().splitlines() if ": " in line)
    assert re.search(r'^setsid honcho -f Procfile\.demo -e "\$envfile" start >', demo, re.MULTILINE)
    free = re.search(r"^for port in ([\d ]+); do", demo, re.MULTILINE)
    assert free is not None
    for name, line in demo_only.items():
        [bind] = re.findall(r"--bind (\S+)", line)
        host, port = _expand(bind, {}).rsplit(":", 1)
        assert host == "127.0.0.1" and port in free[1].split(), name
    # ... while a deploy's web and Flower listen on every interface by default.
    assert _expand(procfile["web"], {}).count("--bind 0.0.0.0:5000") == 1
