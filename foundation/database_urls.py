"""``DATABASE_URL`` as platforms hand it out, mapped to the driver Liaison uses.

Heroku-style platforms (the ones that run Procfiles) set ``DATABASE_URL=postgres://…``, a scheme
SQLAlchemy no longer knows, and plain ``postgresql://`` would pick psycopg2, which Liaison does not
install: both become ``postgresql+psycopg://`` (psycopg 3). SQLite URLs stay as they are. Any
other URL is refused with one line naming the setting, never its value (it may hold a password), and
so is one whose password holds a raw ``@``, ``#``, ``/`` or ``?`` (it must be percent-encoded).
Pure text work: no database driver is imported here (the foundation knows none).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from foundation.options import ConfigError, Parser, refuse_ambiguous_credentials

#: The driver Liaison installs (psycopg[binary] in requirements.txt), as SQLAlchemy names it.
POSTGRES_SCHEME = "postgresql+psycopg"
#: Schemes that mean PostgreSQL: what platforms hand out, and SQLAlchemy's name for Liaison's driver.
_POSTGRES_ALIASES = ("postgres", "postgresql", POSTGRES_SCHEME)
_SQLITE_SCHEMES = ("sqlite", "sqlite+pysqlite")
_EXPECTED = "a postgres://, postgresql:// (postgresql+psycopg://) or sqlite:/// URL"


def normalise_database_url(name: str, raw: str) -> str:
    """``raw`` with a PostgreSQL scheme mapped to :data:`POSTGRES_SCHEME`; a SQLite URL unchanged.
    Raises :class:`ConfigError` naming ``name`` for anything else."""
    scheme, sep, rest = raw.partition("://")
    if not sep:
        raise ConfigError(f"{name} must be {_EXPECTED}")
    scheme = scheme.lower()
    if scheme not in _SQLITE_SCHEMES:  # a SQLite URL has no user name or password, and its path may hold @
        refuse_ambiguous_credentials(name, raw)
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018  # a port that is not a number raises here, not in the driver
    except ValueError:
        raise ConfigError(f"{name} is not a valid URL (check its host and port)") from None
    if scheme in _SQLITE_SCHEMES:
        if parts.netloc:  # sqlite://host/x: SQLAlchemy refuses a SQLite URL with a host
            raise ConfigError(f"{name}: a SQLite URL has no host: sqlite:///relative/path or sqlite:////absolute/path")
        return raw
    if scheme not in _POSTGRES_ALIASES:
        driver = f" (Liaison's driver is psycopg 3: {POSTGRES_SCHEME}://)" if scheme.startswith("postgres") else ""
        raise ConfigError(f"{name} must be {_EXPECTED}{driver}")
    return f"{POSTGRES_SCHEME}://{rest}"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (relative to the working directory, as SQLite opens it), or None
    for other databases, in-memory SQLite and ``file:`` URIs."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in _SQLITE_SCHEMES or not rest.startswith("/"):
        return None
    path = rest[1:].split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return Path(path)


def require_sqlite_folder(name: str, url: str) -> None:
    """Refuse a SQLite file whose folder does not exist: a mistyped path would otherwise become a
    new, empty database in a new folder. (A folder that is a file is left to the start-up check,
    which names the path.)"""
    path = sqlite_file(url)
    if path is not None and not path.absolute().parent.exists():
        raise ConfigError(
            f"{name}: the folder {path.absolute().parent} of the SQLite file does not exist "
            "(create it, or leave DATABASE_URL unset for the file under LIAISON_VAR_DIR)"
        )


DATABASE_URL = Parser(normalise_database_url, "postgres(ql):// or sqlite:/// URL")
