"""Where the files the server reads at run time live, in a checkout and in an installed distribution.

Two of them sit outside the Python packages in a checkout: the migrations (``migrations/``, which
Alembic reads) and the AsyncAPI document (``docs/asyncapi.yaml``, which the web serves). A wheel has
no repository root, so pyproject.toml's ``package-dir`` ships them inside the ``app`` package
(``app/migrations``, ``app/docs``); a checkout has no such folders and reads them at its root.
"""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parent
#: The repository root of a checkout (in an installed distribution: site-packages, never read).
ROOT = APP.parent


def shipped(relative: str) -> Path:
    """``relative`` (``migrations``, ``docs/asyncapi.yaml``) inside the installed ``app`` package if
    it is there, else at the checkout's root."""
    installed = APP / relative
    return installed if installed.exists() else ROOT / relative
