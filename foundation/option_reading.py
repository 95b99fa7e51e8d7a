"""Reading rows of the settings tables, shared by ``Settings`` and ``ProviderSettings``: every row's
value in table order (so a derived default sees the values read before it), and the repr of an
object built from them, which shows no credential (secret rows left out, URL passwords masked)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from foundation.options import Option, mask_url_password


def read_options(env: Mapping[str, str], options: tuple[Option, ...], what: str = "") -> dict[str, Any]:
    """Every option's value by attribute, in table order (a derived default sees earlier values)."""
    values: dict[str, Any] = {}
    for option in options:
        values[option.attr] = option.read(env, values, what)
    return values


def by_attr(options: tuple[Option, ...]) -> dict[str, Option]:
    return {o.attr: o for o in options}


def secret_attrs(options: tuple[Option, ...]) -> frozenset[str]:
    return frozenset(o.attr for o in options if o.secret)


def masked_repr(self: Any) -> str:
    """A repr that shows no credential: secret options are left out, passwords in URLs masked."""
    shown = []
    for f in fields(self):
        if f.name not in self._secret:
            value = getattr(self, f.name)
            shown.append(f"{f.name}={mask_url_password(value)!r}" if isinstance(value, str) else f"{f.name}={value!r}")
    return f"{type(self).__name__}({', '.join(shown)})"
