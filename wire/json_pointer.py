"""Pure: RFC 6901 JSON pointers, the one implementation (a webhook's event id, a vendor profile's
job id, status, outcome and event fields all point into a parsed body with these).

A pointer is only ever *read* through: nothing here evaluates anything, and the walk is a loop over
the pointer's parts, so a pointer cannot reach further than the (already bounded) value it walks.
"""

from __future__ import annotations

from typing import Any

#: A pointer longer than this is a mistake in configuration, not a real path.
MAX_POINTER_CHARS = 200


class PointerMissing(LookupError):
    """The value has nothing where the pointer points."""


def check(pointer: str) -> None:
    """A pointer's form: empty (the whole value) or ``/``-separated parts, ``~`` only as ``~0``/``~1``;
    ValueError saying what is wrong."""
    if pointer and not pointer.startswith("/"):
        raise ValueError("a JSON pointer starts with '/' (or is empty: the whole body)")
    if len(pointer) > MAX_POINTER_CHARS:
        raise ValueError(f"a JSON pointer has at most {MAX_POINTER_CHARS} characters")
    for part in pointer.split("/")[1:]:
        if "~" in part.replace("~0", "").replace("~1", ""):
            raise ValueError("'~' in a JSON pointer must be written ~0 (and '/' as ~1)")


def resolve(data: Any, pointer: str) -> Any:
    """The value at ``pointer`` in ``data``; PointerMissing when a part names nothing there."""
    for raw_part in pointer.split("/")[1:]:
        part = raw_part.replace("~1", "/").replace("~0", "~")
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise PointerMissing(pointer)
    return data
