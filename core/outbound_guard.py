"""Pure: may Liaison call this client-supplied URL, and at which address?

A callback URL comes from a client, so calling it is a request forgery risk (SSRF): a URL naming
``127.0.0.1``, ``0x7f.1`` or a name that resolves to ``10.0.0.5`` would make the worker talk to our
own network. This module holds the policy as plain functions over plain data (stdlib only); the
transport (``workers.transport``) applies it on the connection itself: it resolves the name once,
checks every address, and connects to the address it checked.

- ``parse_target`` reads a URL once, strictly, into a ``Target`` (scheme, canonical host, port,
  request path). The transport sends to the URL rebuilt from it, so no second parser (urllib3's)
  can read the original differently. Userinfo, backslashes, percent signs and anything but
  printable ASCII are refused.
- An IPv4 host in any encoding (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``) is read as
  the resolver would read it (``inet_aton`` rules) and judged as that address.
- ``core.addresses.is_public`` judges an address; IPv4 carried in IPv6 (mapped, NAT64, 6to4) is judged as the
  IPv4 it carries.
- ``AllowList`` is ``LIAISON_OUTBOUND_ALLOW``: named exceptions (``host``, ``host:port``, CIDR).

Every ``Refused`` reason is fixed text: it names no address or port, because it reaches the task's
``last_error``, which the client reads (it must not learn which internal ports answer).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from core.addresses import IPAddress, IPNetwork, is_public, parse_ipv4

#: ``(host, port) -> addresses``: ``socket.getaddrinfo`` in production, a stub in unit tests.
Resolver = Callable[[str, int], Iterable[str]]

MAX_URL_CHARS = 2000
DEFAULT_PORTS = {"http": 80, "https": 443}
REFUSED_PREFIX = "callback URL refused by the outbound guard"

#: The last label "ends in a number": the host is an IPv4 attempt, valid or not (WHATWG URL rule).
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_LOCAL_SUFFIXES = (".localhost",)


class Refused(ValueError):
    """The guard refuses this URL or address. ``str()`` is a fixed reason: no address, no port."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{REFUSED_PREFIX}: {reason}")
        self.reason = reason


# --- the allow-list -------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """``LIAISON_OUTBOUND_ALLOW``: exceptions that may be private. Empty in production.

    ``host`` allows that name (or address) on any port, ``host:port`` only that port, a CIDR any
    address in it. A name entry matches the URL's host; an address entry matches the address the
    connection goes to, however the URL spelled it.
    """

    hosts: frozenset[str] = frozenset()
    host_ports: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def parse(cls, raw: str) -> AllowList:
        """Comma-separated entries; raises ValueError (naming the entry's form, not its value)."""
        hosts: set[str] = set()
        host_ports: set[tuple[str, int]] = set()
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError("a CIDR entry is not a network like 127.0.0.0/8") from None
                continue
            try:
                target = parse_target(f"http://{entry}/")
            except Refused:
                raise ValueError("an entry is not host, host:port or a CIDR") from None
            if target.path != "/":
                raise ValueError("an entry is not host, host:port or a CIDR")
            host, port = target.host, urlsplit(f"http://{entry}").port
            if port is None:
                hosts.add(host)
            else:
                host_ports.add((host, port))
        return cls(frozenset(hosts), frozenset(host_ports), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.hosts or self.host_ports or self.networks)

    def allows(self, host: str, port: int, ip: IPAddress | None = None) -> bool:
        """Is a connection to ``ip``:``port``, for a URL naming ``host``, a listed exception?"""
        names = {host} if ip is None else {host, str(ip)}
        if names & self.hosts or any((name, port) in self.host_ports for name in names):
            return True
        return ip is not None and any(ip.version == net.version and ip in net for net in self.networks)


# --- URLs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A URL as the guard read it: what the transport connects to and sends."""

    scheme: str
    host: str  # lower-case name, or the canonical form of an IP literal
    port: int
    path: str  # the request target: path and query, never empty
    ip: IPAddress | None  # the literal address, when the URL names one

    @property
    def url(self) -> str:
        """The URL rebuilt from what was checked, for the HTTP client (one unambiguous form)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def literal_ip(host: str) -> IPAddress | None:
    """The address a host names directly (IPv6, or IPv4 in any encoding), else None."""
    host = host.strip("[]")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    return parse_ipv4(host)


def obviously_local(host: str) -> bool:
    """A name that resolves to this machine without asking any DNS server."""
    return host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES)


def parse_target(url: str) -> Target:
    """Read ``url`` once, strictly; raise ``Refused`` for anything two parsers could read apart."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise Refused("not an http(s) URL")
    if not url.isascii() or not url.isprintable() or " " in url or "\\" in url:
        raise Refused("the URL has characters outside printable ASCII, or a backslash")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("malformed host or port") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        raise Refused("not an http(s) URL")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise Refused("credentials in the URL")
    raw_host = parts.hostname or ""
    if not raw_host or "%" in parts.netloc:
        raise Refused("malformed host")
    if parts.netloc.startswith("["):
        ip = literal_ip(raw_host)
        if not isinstance(ip, ipaddress.IPv6Address):
            raise Refused("malformed host")
        host = str(ip)
    else:
        name = raw_host[:-1] if raw_host.endswith(".") else raw_host
        labels = name.split(".")
        if _NUMERIC_LABEL.fullmatch(labels[-1]):  # an IPv4 attempt: valid in some encoding, or refused
            ip = parse_ipv4(name)
            if ip is None:
                raise Refused("malformed host")
            host = str(ip)
        else:
            ip = None
            if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
                raise Refused("malformed host")
            host = name
    if port is None:
        port = DEFAULT_PORTS[parts.scheme]
    if not 0 < port < 65536:
        raise Refused("malformed host or port")
    path = parts.path or "/"
    if not path.startswith("/"):
        raise Refused("malformed path")
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(parts.scheme, host, port, path, ip)


def check_address(target: Target, ip: IPAddress, allow: AllowList) -> None:
    """Raise ``Refused`` unless ``ip`` is public or a listed exception for this target."""
    if not is_public(ip) and not allow.allows(target.host, target.port, ip):
        raise Refused("address not public")


def check_offline(url: str, allow: AllowList) -> Target:
    """What can be known without the network (at submit): the URL's form, a literal address in
    any encoding, and names that are obviously this machine. Raises ``Refused``."""
    target = parse_target(url)
    if target.ip is not None:
        check_address(target, target.ip, allow)
    elif obviously_local(target.host) and not allow.allows(target.host, target.port):
        raise Refused("address not public")
    return target


def resolve(target: Target, allow: AllowList, resolver: Resolver) -> list[IPAddress]:
    """The addresses to connect to, every one of them checked; raise ``Refused`` if any is not
    allowed (a name with one private address among public ones is refused: the resolver, not we,
    would pick which one a client library uses)."""
    if target.ip is not None:
        check_address(target, target.ip, allow)
        return [target.ip]
    addresses: list[IPAddress] = []
    for raw in resolver(target.host, target.port):
        ip = literal_ip(str(raw).split("%", 1)[0])
        if ip is None:
            raise Refused("the name resolved to something that is not an address")
        check_address(target, ip, allow)
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise Refused("the name has no address")
    return addresses
