"""Where a vendor that calls back a handed URL (the ``token-url`` personality) may send its events.

The URL comes from the submit's body, so whoever can submit could aim the simulator's POSTs at any
address. It goes out only to the origins the simulator is configured with
(``SIMULATOR_CALLBACK_ORIGINS``), or, when none are, to this machine's loopback. Pure.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from core.origins import origin_of
from core.outbound_guard import literal_ip


def callback_allowed(url: str, origins: tuple[str, ...]) -> bool:
    """``url`` lies on one of ``origins`` (canonical, as ``Settings.callback_origins``); with none
    configured, its host is a loopback address (or ``localhost``). Anything ambiguous is refused."""
    origin = origin_of(url)
    if origin is None:
        return False
    if origins:
        return origin in origins
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    ip = literal_ip(host)
    return ip is not None and ip.is_loopback
