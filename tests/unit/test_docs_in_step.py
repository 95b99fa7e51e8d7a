"""Docs that must not drift from the code: every setting is documented, every beat job names a
task that exists, the error tree in app/errors.py lists every error class."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import app.errors
import workers.errors

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_read_from_the_environment_is_in_env_example() -> None:
    source = (ROOT / "app" / "settings.py").read_text()
    documented = (ROOT / ".env.example").read_text()
    names = set(re.findall(r'"((?:LIAISON|DATABASE|CELERY)_[A-Z_]+)"', source))
    names |= {f"LIAISON_PROVIDER_SIMULATOR_{n}" for n in re.findall(r'prefix \+ "([A-Z_]+)"', source)}
    missing = sorted(n for n in names if n not in documented)
    assert not missing, f"add to .env.example: {missing}"


def _tree_names(module: object, root: type) -> set[str]:
    return {name for name, cls in inspect.getmembers(module, inspect.isclass) if issubclass(cls, root)}


def test_error_trees_in_docstrings_name_every_class() -> None:
    for module, root in ((app.errors, app.errors.ApiError), (workers.errors, workers.errors.CallError)):
        doc = module.__doc__ or ""
        missing = sorted(n for n in _tree_names(module, root) if n != root.__name__ and n not in doc)
        assert not missing, f"{module.__name__} docstring misses {missing}"
