"""Callback origins (core/origins.py) and the pure parts of the credentials lifecycle."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.origins import BadOrigin, normalize_origin, within
from models.client import Client
from service.credentials import MAX_SECRETS, CredentialError, OriginRefused, add_secret, change_origins, retire_secrets

SHOP = ["https://shop.example", "http://127.0.0.1:8080"]


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("https://Shop.Example", "https://shop.example"),
        ("https://shop.example:443/", "https://shop.example"),
        ("HTTP://shop.example:80", "http://shop.example"),
        ("http://shop.example:8443", "http://shop.example:8443"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_origins_are_normalized(value: str, canonical: str) -> None:
    assert normalize_origin(value) == canonical


@pytest.mark.parametrize(
    "value",
    [
        "shop.example",
        "ftp://shop.example",
        "https://shop.example/path",
        "https://shop.example?x=1",
        "https://user:pw@shop.example",
        "https://shop.example:99999",
        "https://",
        "https://shop.example#f",
        "https://evil.example\\@shop.example",
    ],
)
def test_bad_origins_are_refused(value: str) -> None:
    with pytest.raises(BadOrigin):
        normalize_origin(value)


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/cb",
        "https://SHOP.example:443/cb?x=1",
        "http://127.0.0.1:8080/hooks/1",
    ],
)
def test_urls_within(url: str) -> None:
    assert within(url, SHOP)


@pytest.mark.parametrize(
    "url",
    [
        "http://shop.example/cb",  # another scheme
        "https://shop.example:8443/cb",  # another port
        "https://shop.example.evil.example/cb",  # a suffix is not the host
        "https://evil.example/shop.example",
        "http://127.0.0.1:8081/cb",
        "https://user@shop.example/cb",  # userinfo: ambiguous authority, never within
        "https://evil.example\\@shop.example/cb",  # parsers disagree on the host
        "https://shop.example:bad/cb",
        "not a url",
    ],
)
def test_urls_outside(url: str) -> None:
    assert not within(url, SHOP)


def test_no_origins_means_no_restriction() -> None:
    assert within("http://anything.example:1234/x", [])


hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){1,2}", fullmatch=True)


@given(
    scheme=st.sampled_from(["http", "https"]),
    host=hosts,
    port=st.integers(1, 65535),
    path=st.from_regex(r"(/[A-Za-z0-9._~-]{0,10}){0,3}", fullmatch=True),
)
def test_a_url_is_within_its_own_origin_and_no_other_port(scheme: str, host: str, port: int, path: str) -> None:
    origin = normalize_origin(f"{scheme}://{host}:{port}")
    assert within(f"{scheme}://{host.upper()}:{port}{path}", [origin])
    other = port + 1 if port < 65535 else port - 1
    assert not within(f"{scheme}://{host}:{other}{path}", [origin])
    assert not within(f"{scheme}://{host}.evil.example:{port}{path}", [origin])


# --- secrets and origins on a client (no database: the functions change the object) -----------


def _client(*, callback_url: str | None = None, origins: Iterable[str] = ()) -> Client:
    return Client(
        name="shop",
        callback_secrets=["whsec_old"],
        callback_url=callback_url,
        callback_origins=list(origins),
    )


def test_add_then_retire_keeps_the_newest_secret() -> None:
    """The bug this replaces: --drop-old made a third secret and dropped the one just switched to."""
    client = _client()
    new = add_secret(client)
    assert client.callback_secrets == [new, "whsec_old"]
    assert retire_secrets(client) == 1
    assert client.callback_secrets == [new]
    assert retire_secrets(client) == 0 and client.callback_secrets == [new]


def test_secrets_are_bounded() -> None:
    client = _client()
    for _ in range(MAX_SECRETS - 1):
        add_secret(client)
    with pytest.raises(CredentialError):
        add_secret(client)


def test_origins_must_contain_the_default_callback_url() -> None:
    client = _client(callback_url="https://shop.example/cb")
    with pytest.raises(OriginRefused):
        change_origins(client, add=("https://other.example",))
    assert client.callback_origins == []
    assert change_origins(client, add=("https://SHOP.example:443", "https://other.example")) == [
        "https://shop.example",
        "https://other.example",
    ]
    with pytest.raises(OriginRefused):
        change_origins(client, remove=("https://shop.example",))
    assert change_origins(client, remove=("https://other.example",)) == ["https://shop.example"]
    with pytest.raises(OriginRefused):
        change_origins(client, add=("https://shop.example/path",))
