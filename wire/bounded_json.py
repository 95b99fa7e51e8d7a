"""Pure: JSON from untrusted hands, bounded in depth and size before anything recurses over it.

``json.loads`` recurses once per nesting level, and so do ``json.dumps``, the database drivers'
JSON codecs and every ``repr``: a body nested a thousand levels deep raises RecursionError wherever
it goes next (a 500 at submit, a worker task or a beat job that fails on every run). So the depth is
measured on the *text*, by scanning brackets outside string literals, before ``json.loads`` sees it:
a body of any depth is refused in time linear in its length, with the C-speed ``re`` and
``itertools`` machinery doing the walking.

Also home of ``strict_loads``, the one parser for untrusted JSON (request bodies, vendor
responses, stored rows written before these limits existed).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, NoReturn

#: A string literal: a quote, then runs of ordinary characters or one escape each, then a quote.
#: Possessive quantifiers: linear on any input, no backtracking.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}

#: Depth and size limits have a ceiling: json.loads and json.dumps recurse per level, and a worker's
#: stack already holds a few hundred frames of Celery, SQLAlchemy and requests.
MAX_DEPTH_CEILING = 200
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_BYTES = 64 * 1024


class InvalidJson(ValueError):
    """Bytes that are not JSON we can store; the message says why, for a 4xx's detail."""


class TooDeep(InvalidJson):
    """Nested deeper than the limit (measured on the text, before parsing)."""

    def __init__(self, what: str, depth: int, limit: int) -> None:
        super().__init__(f"{what} is nested {depth} levels deep; at most {limit} are allowed")
        self.depth, self.limit = depth, limit


class TooLarge(InvalidJson):
    """Canonical JSON longer than the limit."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes of JSON; at most {limit} are allowed")
        self.size, self.limit = size, limit


@dataclass(frozen=True)
class JsonLimits:
    """How deep and how large one value (a task's ``input``, a vendor's ``outcome``) may be."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_bytes: int = DEFAULT_MAX_BYTES


def nesting_depth(text: str) -> int:
    """How many arrays/objects are open at once at the deepest point of ``text`` (a scalar: 0).

    Brackets inside string literals (escaped quotes included) do not count. Exact for valid JSON;
    for invalid JSON it is some number and ``json.loads`` refuses the text anyway.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def value_depth(value: Any) -> int:
    """The nesting depth of a parsed value, without recursion (``{}`` and ``[]`` are 1)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children)
    return deepest


def canonical(value: Any) -> str:
    """Sorted keys, no spaces: the same value always gives the same text. Bound its depth first."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_size(value: Any) -> int:
    """Bytes of the canonical UTF-8 JSON of a value whose depth was already bounded."""
    return len(canonical(value).encode("utf-8", "surrogatepass"))


def check_bounds(value: Any, limits: JsonLimits, what: str) -> None:
    """Raise TooDeep or TooLarge when a parsed value is past its limits."""
    depth = value_depth(value)
    if depth > limits.max_depth:
        raise TooDeep(what, depth, limits.max_depth)
    size = canonical_size(value)
    if size > limits.max_bytes:
        raise TooLarge(what, size, limits.max_bytes)


def _no_constant(name: str) -> NoReturn:
    raise InvalidJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson("a number is too large")
    return value


def _check_strings(data: Any) -> None:
    """Every string (keys too) must be storable: valid UTF-8 and without U+0000."""
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            if "\x00" in value:
                raise InvalidJson("strings must not contain \\u0000")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJson("strings must be valid Unicode (a lone surrogate such as \\ud800 is not)") from None


def _text(raw: bytes | bytearray | str) -> str:
    """Bytes → text exactly as ``json.loads`` decodes them (UTF-8, -16 or -32, detected): the
    depth is measured on what the parser will read, not on bytes a UTF-16 body could disguise."""
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode(json.detect_encoding(raw), "surrogatepass")
    except UnicodeDecodeError as exc:
        raise InvalidJson(str(exc)) from None


def strict_loads(
    raw: bytes | bytearray | str, *, max_depth: int = DEFAULT_MAX_DEPTH + 1, what: str = "the body"
) -> Any:
    """``json.loads`` for untrusted JSON, refused (TooDeep) past ``max_depth`` before parsing, and
    with every other way it can fail turned into InvalidJson.

    Why not plain ``json.loads``: besides JSONDecodeError it raises a bare ValueError for integers
    past 4300 digits and RecursionError for deep nesting; and it accepts what PostgreSQL cannot
    store (NaN, ±Infinity, numbers that overflow to ±inf, \\u0000, lone surrogates such as
    \\ud800), which would fail later, at fingerprinting or in the database driver, as a 500.
    """
    text = _text(raw)
    depth = nesting_depth(text)
    if depth > min(max_depth, MAX_DEPTH_CEILING):
        raise TooDeep(what, depth, min(max_depth, MAX_DEPTH_CEILING))
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except InvalidJson:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidJson(str(exc)) from None
    except RecursionError:  # cannot happen below the ceiling; kept so nothing escapes untyped
        raise InvalidJson("nested too deeply") from None
    except ValueError:  # int() refuses more than 4300 digits (sys.get_int_max_str_digits)
        raise InvalidJson("a number has too many digits") from None
    _check_strings(data)
    return data
