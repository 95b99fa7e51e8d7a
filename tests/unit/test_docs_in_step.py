"""Docs that must not drift from the code: every setting is documented, every metric the docs name
exists, the error trees' docstrings list every error class. (That every beat job names a registered
task needs the Celery app: tests/integration/test_wiring.py.)"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import app.errors
import core.errors

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_read_from_the_environment_is_in_env_example() -> None:
    source = (ROOT / "foundation" / "settings.py").read_text()
    documented = (ROOT / ".env.example").read_text()
    names = set(re.findall(r'"((?:LIAISON|DATABASE|CELERY)_[A-Z_]+)"', source))
    names |= {f"LIAISON_PROVIDER_SIMULATOR_{n}" for n in re.findall(r'prefix \+ "([A-Z_]+)"', source)}
    missing = sorted(n for n in names if n not in documented)
    assert not missing, f"add to .env.example: {missing}"


def test_every_metric_named_in_the_docs_exists() -> None:
    code = "".join(p.read_text() for p in [*(ROOT / "app" / "observability").glob("*.py"), ROOT / "foundation" / "metrics.py"])
    defined = set(re.findall(r'"(liaison_[a-z_]+)"', code))
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        named = set(re.findall(r"\b(liaison_[a-z_]+)", doc.read_text()))
        # histograms and counters are exposed with suffixes the client library adds
        missing = sorted(n for n in named if re.sub(r"_(bucket|count|sum)$", "", n) not in defined)
        assert not missing, f"{doc.name} names metrics the code does not define: {missing}"


def _tree_names(module: object, root: type) -> set[str]:
    return {name for name, cls in inspect.getmembers(module, inspect.isclass) if issubclass(cls, root)}


def test_error_trees_in_docstrings_name_every_class() -> None:
    for module, root in ((app.errors, app.errors.ApiError), (core.errors, core.errors.CallError)):
        doc = module.__doc__ or ""
        missing = sorted(n for n in _tree_names(module, root) if n != root.__name__ and n not in doc)
        assert not missing, f"{module.__name__} docstring misses {missing}"
