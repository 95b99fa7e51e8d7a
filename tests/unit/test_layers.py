"""The floor plan holds: every import points down (docs/architecture.md#layers).

The contracts live in pyproject.toml (``[tool.importlinter]``); ``lint-imports`` checks every
import in the ten packages (the nine layers and the client), direct or through others. The two
top-level modules import-linter cannot take as roots (celeryconfig.py, beat_schedule.py) are
checked here, and so is the promise the layering exists for: importing the pure core loads
nothing but the standard library.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The pure layers: what a newcomer can import and unit-test with nothing installed. Found, not
#: listed: a module added to one of these packages is held to the promise without anyone noticing.
PURE_PACKAGES = ("core", "webhooks", "wire")
PURE = tuple(
    sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in PURE_PACKAGES
        for path in (ROOT / package).rglob("*.py")
    )
)
HEAVY = (
    "sqlalchemy",
    "flask",
    "werkzeug",
    "celery",
    "kombu",
    "requests",
    "urllib3",
    "alembic",
    "structlog",
    "prometheus_client",
    "models",
    "service",
    "runtime",
    "workers",
    "app",
    "foundation",
)


def test_import_contracts_are_kept() -> None:
    """``lint-imports`` exits 0 only when every contract is kept; its report names the broken import."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def _project_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names & {
        "app",
        "workers",
        "runtime",
        "service",
        "webhooks",
        "wire",
        "models",
        "foundation",
        "core",
        "beat_schedule",
        "celeryconfig",
    }


def test_celery_config_and_beat_schedule_sit_below_the_roots() -> None:
    """Celery's configuration reads settings only; the beat schedule is plain data."""
    assert _project_imports(ROOT / "celeryconfig.py") <= {"foundation", "beat_schedule"}
    assert _project_imports(ROOT / "beat_schedule.py") == set()


def test_the_pure_layers_are_found_whole() -> None:
    """Every module of the three pure packages is checked, the newest ones too."""
    assert {"core.states", "core.urls", "webhooks.signing", "wire.bounded_json", "wire.channel_messages"} <= set(PURE)
    assert len(PURE) >= 20


def test_importing_the_pure_core_loads_only_the_standard_library() -> None:
    """In a fresh interpreter: no third-party library and no upper layer comes along."""
    code = (
        "import json, sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
