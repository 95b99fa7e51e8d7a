"""Refuse to start Flower with weak basic-auth credentials: ``python -m workers.flower_check``.

Flower reads ``FLOWER_BASIC_AUTH`` (``user:password``, several comma-separated) itself, so this runs
first on the Procfile's ``flower:`` line and exits 1 with one sentence when the value is missing,
malformed, has a password shorter than MIN_PASSWORD_LEN, or reuses a password from
``.env.example`` (anyone can read that file). The sentence never contains the password.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from foundation.settings import ConfigError

MIN_PASSWORD_LEN = 16
ENV_EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"
#: Placeholders refused even if .env.example is not shipped next to the code.
KNOWN_PLACEHOLDERS = frozenset({"change-me", "changeme", "password", "admin", "secret"})


def example_passwords(text: str) -> set[str]:
    """Every password a ``FLOWER_BASIC_AUTH=`` line (commented or not) of an env file shows."""
    found: set[str] = set()
    for value in re.findall(r"^\s*#?\s*FLOWER_BASIC_AUTH=(\S*)", text, re.MULTILINE):
        found |= {pair.partition(":")[2] for pair in value.split(",") if pair.partition(":")[2]}
    return found


def check_basic_auth(value: str, examples: Iterable[str] = ()) -> None:
    """Raise ConfigError (naming FLOWER_BASIC_AUTH, never the password) unless every pair is a
    ``user:password`` with a strong password."""
    pairs = [p for p in value.strip().split(",") if p]
    if not pairs:
        raise ConfigError("FLOWER_BASIC_AUTH must be set to user:password (Flower must not run open)")
    refused = KNOWN_PLACEHOLDERS | set(examples)
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user or not password:
            raise ConfigError("FLOWER_BASIC_AUTH must be user:password (comma-separated pairs)")
        if password in refused:
            raise ConfigError("FLOWER_BASIC_AUTH uses the example password from .env.example; choose your own")
        if len(password) < MIN_PASSWORD_LEN:
            raise ConfigError(f"FLOWER_BASIC_AUTH passwords must be at least {MIN_PASSWORD_LEN} characters")


def main(env: Mapping[str, str] | None = None, example_file: Path = ENV_EXAMPLE) -> int:
    env = os.environ if env is None else env
    examples = example_passwords(example_file.read_text()) if example_file.is_file() else set()
    try:
        check_basic_auth(env.get("FLOWER_BASIC_AUTH", ""), examples)
    except ConfigError as exc:
        print(f"flower: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
