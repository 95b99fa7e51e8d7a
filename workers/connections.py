"""Kept connections for outbound calls (``workers.transport``): one ``requests.Session`` per thread
for provider calls and one for client-supplied URLs, whose pools make deadline-bound connections
pinned to the outbound guard's checked addresses.

They are never shared between the two kinds: a guarded call is checked by the guard every time,
and only ever reuses a connection made to an address the guard checked; a provider call may go
through the operator's proxy (the environment's, read once per origin), a guarded one never does.
A connection read to the end of its response is kept for the next call to that host for
``KEEP_ALIVE_S``: that saves a TCP (and TLS) handshake per call. A forked child (the prefork
pool) starts with none of its parent's.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from core.outbound_guard import IPAddress

if TYPE_CHECKING:
    from workers.call_deadlines import Call

#: ``(address, timeout, source_address, socket_options) -> socket``; a stub in unit tests.
Connector = Callable[..., socket.socket]

#: How long a connection that finished a call is kept for the next one to the same host and port.
#: Short: a server closes idle connections on its own schedule (gunicorn after 2 s), and a request
#: sent just as it closes one fails as a reset after sending. 0: one connection per call.
KEEP_ALIVE_S = 1.5
#: Hosts whose connections one session keeps (least recently used first out).
POOLED_HOSTS = 16


class _Active(threading.local):
    """What the call this thread is making connects under (read by connections and pools, which
    outlive any one call)."""

    call: Call | None = None
    pinned: Sequence[IPAddress] | None = None
    connector: Connector | None = None


active = _Active()


class _DeadlineConnection(HTTPConnection):
    """urllib3's connection, opening its socket to the checked addresses under the deadline."""

    def _new_conn(self) -> socket.socket:
        call, pinned, connector = active.call, active.pinned, active.connector
        assert call is not None and connector is not None, "connections are made only inside send()"
        addresses = [str(ip) for ip in pinned] if pinned is not None else [self._dns_host]
        timeout = self.timeout if isinstance(self.timeout, (int, float)) else None
        last: OSError | None = None
        for address in addresses:
            remaining = call.remaining()
            if remaining <= 0:
                last = TimeoutError("call deadline passed")
                break
            try:
                sock = connector(
                    (address, self.port),
                    min(timeout, remaining) if timeout else remaining,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except socket.gaierror as exc:  # only without pinning: a name we did not resolve
                raise NameResolutionError(self.host, self, exc) from exc
            except OSError as exc:
                last = exc
                continue
            try:
                call.register(sock)
            except TimeoutError as exc:
                last = exc
                break
            sys.audit("http.client.connect", self, self.host, self.port)
            return sock
        if isinstance(last, TimeoutError):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out") from last
        raise NewConnectionError(self, f"Failed to establish a new connection: {last}") from last


class _DeadlineHTTPSConnection(_DeadlineConnection, HTTPSConnection):
    pass


class _KeptConnections(HTTPConnectionPool):
    """A host's pool: a connection kept from an earlier call is used again only if it went idle
    less than ``KEEP_ALIVE_S`` ago, and its socket joins this call's deadline."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn: Any = super()._get_conn(timeout)  # urllib3 drops one the server has closed
        idle_since = getattr(conn, "liaison_idle_since", None)
        if conn.sock is not None and (idle_since is None or time.monotonic() - idle_since > KEEP_ALIVE_S):
            conn.close()  # the server may be closing it right now: a request sent into that is lost
        if conn.sock is not None and active.call is not None:
            active.call.register(conn.sock)
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            conn.liaison_idle_since = time.monotonic()
        super()._put_conn(conn)


class _HTTPPool(_KeptConnections):
    ConnectionCls = _DeadlineConnection


class _HTTPSPool(_KeptConnections, HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _Adapter(HTTPAdapter):
    """requests' adapter whose pools make deadline-bound, pinned connections."""

    def __init__(self) -> None:
        super().__init__(pool_connections=POOLED_HOSTS, pool_maxsize=1, max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """An operator's egress proxy (provider calls only): its connections are under the deadline too."""
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager


class _Sessions(threading.local):
    """This thread's sessions, made again in a forked child (nothing pooled crosses a fork)."""

    pid = 0
    by_kind: dict[bool, requests.Session]


_sessions = _Sessions()


def session(guarded: bool) -> requests.Session:
    """A client-supplied URL's calls and the operator's provider calls never share a session, nor
    so a connection: a provider call may go through a proxy, a guarded one never does."""
    if _sessions.pid != os.getpid():
        _sessions.pid, _sessions.by_kind = os.getpid(), {}
    session = _sessions.by_kind.get(guarded)
    if session is None:
        session = requests.Session()
        # never read per call: a provider call takes what the environment says once per origin
        # (environment_settings); a guarded call never uses a proxy or ~/.netrc
        session.trust_env = False
        adapter = _Adapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        _sessions.by_kind[guarded] = session
    return session


def environment_settings(url: str) -> dict[str, Any]:
    """What requests would read from the environment for a provider call to ``url``: its proxy
    (``HTTPS_PROXY`` and friends, honouring ``NO_PROXY``), a CA bundle (``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE``) and ``~/.netrc`` credentials, as keyword arguments of ``Session.request``.

    Read once per origin and kept: a session that trusts the environment reads it all again on
    every call (every variable scanned, ``~/.netrc`` looked up), which cost a provider call about
    0.4 ms of CPU, and a process's environment does not change under it."""
    parts = urlsplit(url)
    return _environment_of(parts.scheme, parts.netloc)


@lru_cache(maxsize=POOLED_HOSTS)
def _environment_of(scheme: str, netloc: str) -> dict[str, Any]:
    url = f"{scheme}://{netloc}/"
    with requests.Session() as probe:  # trusts the environment: requests' own reading of it
        found = probe.merge_environment_settings(url, {}, None, None, None)
    settings: dict[str, Any] = {"proxies": found["proxies"], "verify": found["verify"]}
    auth = requests.utils.get_netrc_auth(url)
    if auth:
        settings["auth"] = auth
    return settings
