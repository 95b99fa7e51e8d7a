"""Pure: is an IP address public, read the way the resolver reads it?

An IPv4 host in any encoding (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``) is read with
``inet_aton`` rules and judged as that address; IPv4 carried in IPv6 (mapped, NAT64, 6to4) is judged
as the IPv4 it carries. The outbound guard (``core.outbound_guard``) builds its policy on these.
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Not globally reachable, beyond what this Python's ``is_global`` already knows: CGNAT, IETF
#: protocol assignments (all of 192.0.0.0/24, not only the /29) and the retired 6to4 relay anycast.
_NOT_GLOBAL_V4 = tuple(ipaddress.IPv4Network(n) for n in ("100.64.0.0/10", "192.0.0.0/24", "192.88.99.0/24"))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: carries a global IPv4
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local-use: never public
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated; nothing legitimate uses it
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")

#: One part of an IPv4 address as inet_aton reads it: hex, octal (leading 0) or decimal.
_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as ``inet_aton`` reads it (1 to 4 parts, each hex, octal or decimal, the last
    filling the remaining bytes), or None when it is not an IPv4 address in any encoding."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    values = [int(p[2:], 16) if p[:2].lower() == "0x" else int(p, 8) if p.startswith("0") else int(p) for p in parts]
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one delivers to: IPv4-mapped, NAT64 (well-known prefix) or 6to4."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _special(ip: IPAddress) -> bool:
    """Flags that keep a callback away from an address, whatever ``is_global`` says of it."""
    return ip.is_multicast or ip.is_reserved or ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_private


def _public_ipv4(ip: ipaddress.IPv4Address) -> bool:
    return ip.is_global and not (_special(ip) or any(ip in net for net in _NOT_GLOBAL_V4))


def is_public(ip: IPAddress) -> bool:
    """May a client's callback reach this address? Only a global unicast one.

    IPv4-mapped and NAT64 addresses are judged by the IPv4 they carry (that is where the packets
    go); a 6to4 one must be public both ways; IPv4-compatible and NAT64 local-use ones never are.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return _public_ipv4(ip)
    carried = embedded_ipv4(ip)
    if ip.ipv4_mapped is not None or ip in _NAT64:
        return carried is not None and _public_ipv4(carried)
    if ip in _NAT64_LOCAL or ip in _IPV4_COMPATIBLE:
        return False
    if carried is not None and not _public_ipv4(carried):  # 6to4
        return False
    return ip.is_global and not (_special(ip) or ip.is_site_local)
