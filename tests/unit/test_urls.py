"""core.urls.strip_url: what may be stored or shown of a URL outside its task (incidents, the
callback endpoint list, outbox rows, dead letters, logs) carries no userinfo, query or fragment."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.urls import INVALID, strip_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://shop.example/cb", "https://shop.example/cb"),
        ("https://user:pa55@shop.example:8443/cb/x?token=s3cret&a=1#frag", "https://shop.example:8443/cb/x"),
        ("https://token@shop.example/cb", "https://shop.example/cb"),
        ("HTTP://Shop.Example/Path?q", "http://shop.example/Path"),
        ("http://[::1]:8080/cb?k=v", "http://[::1]:8080/cb"),
        ("http://u:p@[2001:db8::1]/x", "http://[2001:db8::1]/x"),
        ("http://shop.example?only=query", "http://shop.example"),
        ("http://evil.example\\@127.0.0.1/", "http://127.0.0.1/"),  # what the parser connects to, no userinfo
    ],
)
def test_userinfo_query_and_fragment_are_stripped(url: str, shown: str) -> None:
    assert strip_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url?token=s3cret",
        "http://[::1/x?k=s3cret",
        "http://h:99999/?k=s3cret",
        "//host/x?k=s3cret",
        "http://:80/?k=s3cret",
        "mailto:x?k=s3cret",
    ],
)
def test_what_does_not_parse_is_never_echoed(url: str) -> None:
    assert strip_url(url) == INVALID


SECRET = "Zs3cretZ"
host = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True)
path = st.from_regex(r"(/[A-Za-z0-9._~%-]{0,12}){0,4}", fullmatch=True)
port = st.none() | st.integers(1, 65535)


@given(
    scheme=st.sampled_from(["http", "https"]),
    host=host,
    port=port,
    path=path,
    user=st.booleans(),
    query=st.booleans(),
    fragment=st.booleans(),
)
def test_a_secret_in_userinfo_query_or_fragment_never_survives(
    scheme: str,
    host: str,
    port: int | None,
    path: str,
    user: bool,
    query: bool,
    fragment: bool,
) -> None:
    authority = (f"user:{SECRET}@" if user else "") + host + (f":{port}" if port else "")
    url = f"{scheme}://{authority}{path}" + (f"?key={SECRET}" if query else "") + (f"#{SECRET}" if fragment else "")
    shown = strip_url(url)
    assert SECRET not in shown
    assert shown == f"{scheme}://{host}" + (f":{port}" if port else "") + path  # nothing else is lost
    parts = urlsplit(shown)
    assert (parts.username, parts.query, parts.fragment) == (None, "", "")


@given(st.text(max_size=80))
def test_any_text_is_stripped_idempotently_and_never_keeps_a_query_or_userinfo(text: str) -> None:
    shown = strip_url(text)
    assert strip_url(shown) == shown
    if shown != INVALID:
        parts = urlsplit(shown)
        assert (parts.username, parts.password, parts.query, parts.fragment) == (None, None, "", "")
