"""The outbound guard's policy (core.outbound_guard): addresses in every encoding, the allow-list,
URLs two parsers could read apart, and resolution that checks every address.

Addresses here are data: nothing is connected to. Public ones are well-known public resolvers'
ranges (1.0.0.0/8, 8.0.0.0/8); the guard is judged against ``socket.inet_aton`` as the oracle of
how the system's resolver reads an IPv4 host.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.outbound_guard import (
    REFUSED_PREFIX,
    AllowList,
    Refused,
    check_offline,
    is_public,
    parse_ipv4,
    parse_target,
    resolve,
)

FORBIDDEN_V4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
PUBLIC_V4 = ["1.0.0.0/8", "8.0.0.0/8"]
NOTHING = AllowList()


def addresses_in(cidrs: list[str]) -> st.SearchStrategy[ipaddress.IPv4Address]:
    networks = [ipaddress.IPv4Network(c) for c in cidrs]
    return st.sampled_from(networks).flatmap(
        lambda net: st.integers(int(net.network_address), int(net.broadcast_address)).map(ipaddress.IPv4Address)
    )


def _part(value: int, style: str) -> str:
    if style == "hex":
        return hex(value)
    if style == "HEX":
        return "0X" + format(value, "X")
    if style == "octal":
        return "0" + format(value, "o")
    return str(value)


@st.composite
def renderings(
    draw: st.DrawFn, address_strategy: st.SearchStrategy[ipaddress.IPv4Address]
) -> tuple[ipaddress.IPv4Address, str]:
    """An address and one way to write it that inet_aton accepts: 1 to 4 parts, each decimal, octal or hex."""
    ip = draw(address_strategy)
    n = int(ip)
    b = n.to_bytes(4, "big")
    parts = draw(st.sampled_from([1, 2, 3, 4]))
    values = {1: [n], 2: [b[0], n & 0xFFFFFF], 3: [b[0], b[1], n & 0xFFFF], 4: list(b)}[parts]
    styles = draw(st.lists(st.sampled_from(["dec", "hex", "HEX", "octal"]), min_size=parts, max_size=parts))
    return ip, ".".join(_part(v, s) for v, s in zip(values, styles, strict=True))


# --- addresses in every encoding ------------------------------------------------------------


@given(renderings(addresses_in(FORBIDDEN_V4)))
def test_forbidden_ipv4_in_every_encoding_is_read_as_the_resolver_reads_it_and_refused(case):
    ip, text = case
    assert socket.inet_aton(text) == ip.packed  # the oracle: what the system's resolver makes of it
    assert parse_ipv4(text) == ip
    assert not is_public(ip)
    with pytest.raises(Refused) as info:
        check_offline(f"http://{text}:8080/cb", NOTHING)
    assert str(info.value) == f"{REFUSED_PREFIX}: address not public"


@given(renderings(addresses_in(PUBLIC_V4)))
def test_public_ipv4_in_every_encoding_is_allowed_as_itself(case):
    ip, text = case
    target = check_offline(f"https://{text}/cb?x=1", NOTHING)
    assert target.ip == ip and target.host == str(ip) and target.url == f"https://{ip}:443/cb?x=1"
    assert resolve(target, NOTHING, resolver=_never) == [ip]


@given(
    addresses_in(FORBIDDEN_V4),
    st.sampled_from(["::ffff:{v4}", "::ffff:{hex}", "64:ff9b::{v4}", "2002:{hex}::1", "::{v4}"]),
)
def test_ipv4_carried_in_ipv6_is_judged_as_what_it_carries(ip, form):
    hexed = f"{int(ip) >> 16:x}:{int(ip) & 0xFFFF:x}"
    text = form.format(v4=ip, hex=hexed)
    assert not is_public(ipaddress.IPv6Address(text))
    with pytest.raises(Refused):
        check_offline(f"http://[{text}]:8080/", NOTHING)


@given(addresses_in(PUBLIC_V4))
def test_public_ipv4_mapped_or_nat64_is_allowed(ip):
    assert is_public(ipaddress.IPv6Address(f"::ffff:{ip}"))
    assert is_public(ipaddress.IPv6Address(f"64:ff9b::{ip}"))


@pytest.mark.parametrize(
    "address",
    [
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "2001:db8::1",
        "64:ff9b:1::a00:1",
        "2001::1",
        "fec0::1",
    ],
)
def test_non_public_ipv6_is_refused(address):
    assert not is_public(ipaddress.IPv6Address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "9.9.9.9", "2606:4700:4700::1111", "2001:4860:4860::8888"])
def test_public_addresses_are_allowed(address):
    assert is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.256",
        "0x100.1",
        "08.1.1.1",
        "1.2.3.4.5",
        "0x",
        "1.16777216",
        "4294967296",
        "example.123",
        "a..b",
        "-a.example",
        "a_b-.example",
        "[::1",
        "[not-v6]",
    ],
)
def test_a_host_that_is_no_address_and_no_name_is_refused(host):
    with pytest.raises(Refused):
        parse_target(f"http://{host}/")


# --- URLs that two parsers could read apart ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://user:password@callbacks.example/cb",
        "http://user@callbacks.example/cb",
        "http://:@callbacks.example/cb",
        "http://evil.example\\@127.0.0.1/",
        "http://evil.example%5C@127.0.0.1/",
        "http://callbacks.example\\.evil/",
        "http://callbacks.example/\\..\\",
        "http://callbacks.example%2F@8.8.8.8/",
        "http://[fe80::1%25eth0]/",
        "http://callbacks.example:99999/",
        "http://callbacks.example:0/",
        "http://callbäcks.example/",
        "http://callbacks.example/a b",
        "http://callbacks.example/\x00",
        "ftp://callbacks.example/",
        "file:///etc/passwd",
        "gopher://callbacks.example/",
        "//callbacks.example/cb",
        "http:///cb",
    ],
)
def test_urls_the_guard_refuses_to_read(url):
    with pytest.raises(Refused) as info:
        check_offline(url, AllowList.parse("127.0.0.0/8,callbacks.example"))
    assert "127.0.0.1" not in str(info.value) and "callbacks.example" not in str(info.value)


def test_a_target_is_rebuilt_in_one_canonical_form():
    target = parse_target("HTTP://Callbacks.Example./hooks/a?b=1#frag")
    assert (target.scheme, target.host, target.port, target.path) == ("http", "callbacks.example", 80, "/hooks/a?b=1")
    assert target.url == "http://callbacks.example:80/hooks/a?b=1"
    assert parse_target("https://[2606:4700:4700::1111]:8443").url == "https://[2606:4700:4700::1111]:8443/"


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST", "localhost.", "api.localhost", "localhost.localdomain", "ip6-localhost"]
)
def test_obviously_local_names_are_refused_without_a_lookup(host):
    with pytest.raises(Refused):
        check_offline(f"http://{host}:8080/", NOTHING)


def test_other_names_wait_for_delivery():
    assert check_offline("https://callbacks.example/cb", NOTHING).ip is None


# --- the allow-list -------------------------------------------------------------------------


def test_allow_host_port_lets_exactly_that_port_through_however_the_address_is_written():
    allow = AllowList.parse(" 127.0.0.1:5002 , ")
    for spelling in ("127.0.0.1", "2130706433", "0x7f.1", "127.1", "0177.0.0.1"):
        assert check_offline(f"http://{spelling}:5002/cb", allow).ip == ipaddress.IPv4Address("127.0.0.1")
        with pytest.raises(Refused):
            check_offline(f"http://{spelling}:5003/cb", allow)
    with pytest.raises(Refused):
        check_offline("http://127.0.0.2:5002/cb", allow)


def test_allow_host_lets_every_port_of_that_name_through_and_nothing_else():
    allow = AllowList.parse("localhost")
    target = check_offline("http://localhost:1234/", allow)
    assert resolve(target, allow, resolver=lambda host, port: ["127.0.0.1", "::1"]) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    other = parse_target("http://internal.example:1234/")
    with pytest.raises(Refused):  # another name that resolves to the same address is not listed
        resolve(other, allow, resolver=lambda host, port: ["127.0.0.1"])
    with pytest.raises(Refused):
        check_offline("http://127.0.0.1:1234/", allow)


def test_allow_cidr_lets_addresses_in_it_through_on_any_port():
    allow = AllowList.parse("10.1.0.0/16,fd00::/8")
    assert check_offline("http://10.1.2.3:9/", allow).ip is not None
    assert check_offline("http://[fd00::5]:9/", allow).ip is not None
    with pytest.raises(Refused):
        check_offline("http://10.2.0.1:9/", allow)
    target = parse_target("http://internal.example/")
    assert resolve(target, allow, resolver=lambda h, p: ["10.1.0.7"]) == [ipaddress.ip_address("10.1.0.7")]


@pytest.mark.parametrize("raw", ["127.0.0.1:notaport", "10.0.0.0/33", "user@host", "host/path/x", "a b", "[::1"])
def test_a_bad_allow_entry_is_refused(raw):
    with pytest.raises(ValueError):
        AllowList.parse(raw)


def test_an_empty_allow_list_allows_nothing():
    assert not AllowList.parse("") and not AllowList.parse(" , ")
    assert not AllowList.parse("").allows("127.0.0.1", 80, ipaddress.ip_address("127.0.0.1"))


# --- resolution -----------------------------------------------------------------------------


def _never(host: str, port: int) -> list[str]:
    raise AssertionError("a literal address must not be looked up")


def test_every_resolved_address_is_checked():
    target = parse_target("http://callbacks.example/")
    assert resolve(target, NOTHING, resolver=lambda h, p: ["8.8.8.8", "2606:4700:4700::1111"])
    for mixed in (
        ["8.8.8.8", "10.0.0.1"],
        ["192.168.1.1", "8.8.8.8"],
        ["8.8.8.8", "::ffff:127.0.0.1"],
        ["fe80::1%eth0"],
        [],
    ):

        def resolver(_host: str, _port: int, mixed: list[str] = mixed) -> list[str]:
            return mixed

        with pytest.raises(Refused) as info:
            resolve(target, NOTHING, resolver=resolver)
        assert not any(address in str(info.value) for address in mixed)


@given(addresses_in(PUBLIC_V4), addresses_in(FORBIDDEN_V4))
def test_a_second_lookup_cannot_change_what_the_first_checked(public, private):
    """Rebinding: the name resolves to a public address, then to a private one. ``resolve`` asks
    once and returns what it checked; the transport (test_transport.py) connects only to that."""
    answers = iter([[str(public)], [str(private)]])
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    target = parse_target("http://rebind.example/cb")
    assert resolve(target, NOTHING, resolver=rebinding) == [public]
    assert calls == ["rebind.example"]
    with pytest.raises(Refused):
        resolve(target, NOTHING, resolver=rebinding)
