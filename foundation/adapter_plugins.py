"""Finding a vendor adapter written in Python (a plugin, ``LIAISON_PROVIDER_<NAME>_KIND=plugin``) and
what Liaison hands it. The interface itself, for an adapter's author, is ``workers.providers.plugin``
(docs/design.md §5 "Adapters in Python"); this module is below it so that settings can load and check
the class at start-up (a typo stops the start naming the variable, never with a traceback) and the
web process can build the inbound side without the workers layer.

``LIAISON_PROVIDER_<NAME>_ADAPTER`` is either the name of an entry point in the ``liaison.adapters``
group (an installed package declares it) or ``package.module:Class``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol

from core.errors import OutboundRefused
from wire.bounded_json import JsonLimits

#: The entry point group an adapter's package declares its class in (its pyproject.toml).
GROUP = "liaison.adapters"
#: What an adapter class must define: the outbound provider protocol and the inbound side.
REQUIRED_METHODS = ("submit", "cancel", "status", "find", "verify", "interpret")
_MODULE_CLASS = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_ENTRY_NAME = re.compile(r"[\w.-]{1,100}")


class AdapterNotFound(ValueError):
    """The adapter named cannot be loaded or is not an adapter class; the message says why in one line."""


def _imported(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterNotFound(f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AdapterNotFound(f"{module_name!r} has no {attr!r}") from None


def _entry_point(name: str) -> Any:
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise AdapterNotFound(f"no installed package declares {name!r} in the entry point group {GROUP}")
    if len({ep.value for ep in found}) > 1:
        raise AdapterNotFound(f"several installed packages declare {name!r} in {GROUP}")
    try:
        return found[0].load()
    except ImportError as exc:
        raise AdapterNotFound(f"entry point {name!r} cannot be loaded ({type(exc).__name__}: {exc})") from None
    except AttributeError as exc:
        raise AdapterNotFound(f"entry point {name!r} cannot be loaded ({exc})") from None


def load_adapter(spec: str) -> type:
    """The adapter class named by ``spec`` (an entry point name or ``module:Class``), checked to be a
    class with every method of :data:`REQUIRED_METHODS`. Raises :class:`AdapterNotFound`."""
    if ":" in spec:
        if not _MODULE_CLASS.fullmatch(spec):
            raise AdapterNotFound("must be an entry point name or package.module:Class")
        found = _imported(spec)
    elif _ENTRY_NAME.fullmatch(spec):
        found = _entry_point(spec)
    else:
        raise AdapterNotFound("must be an entry point name or package.module:Class")
    if not isinstance(found, type):
        raise AdapterNotFound(f"{spec!r} is not a class")
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(found, m, None))]
    if missing:
        raise AdapterNotFound(f"{spec!r} lacks {', '.join(missing)} (docs/design.md §5, Adapters in Python)")
    return found


class HttpCaller(Protocol):
    """How an adapter calls its vendor: only through Liaison's caller (``workers.providers.plugin.
    VendorHttp``), which bounds every call by the provider's deadline and body cap, classifies its
    failure, and puts any address the vendor supplied through the outbound guard."""

    def request(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any: ...

    def request_url(self, method: str, url: str, *, idempotent: bool, **kwargs: Any) -> Any: ...


class NoCalls:
    """The caller of an adapter built for the inbound side (the web process, a reply-queue consumer):
    verifying and interpreting a request read the request only, so every call is refused."""

    def request(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any:
        raise OutboundRefused("the inbound side of an adapter makes no calls")

    def request_url(self, method: str, url: str, *, idempotent: bool, **kwargs: Any) -> Any:
        raise OutboundRefused("the inbound side of an adapter makes no calls")


@dataclass(frozen=True)
class AdapterContext:
    """What Liaison gives an adapter besides its settings: the one way to call out (``http``), the URL
    the vendor's events go to (``webhook_url``: empty on the inbound side), and the bounds of an
    outcome (``outcome_limits``: a body parsed with them is bounded; Liaison checks what an adapter
    returns against them again anyway)."""

    http: HttpCaller = field(default_factory=NoCalls)
    webhook_url: str = ""
    outcome_limits: JsonLimits = field(default_factory=JsonLimits)
