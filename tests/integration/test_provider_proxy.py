"""A provider call takes the operator's proxy from the environment (honouring ``NO_PROXY``), read
once per origin (``workers.connections.environment_settings``), never on every call; a call to a
client-supplied URL never takes it. Loopback only: the "vendor" listens on 127.0.0.2, the proxy on
127.0.0.1, each a socket that records the request line it was sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from core.outbound_guard import AllowList
from tests.support.listeners import LineRecorder
from workers import connections, http


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LineRecorder, LineRecorder]]:
    vendor, proxy = LineRecorder("127.0.0.2"), LineRecorder("127.0.0.1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    connections._environment_of.cache_clear()
    yield vendor, proxy
    connections._environment_of.cache_clear()
    vendor.close()
    proxy.close()


def _get(url: str, guard: AllowList | None = None) -> requests.Response:
    return http.call("GET", url, timeout=(2, 2), idempotent=True, deadline_s=5, max_body_bytes=1024, guard=guard)


def test_a_provider_call_goes_through_the_environments_proxy_read_once(
    servers: tuple[LineRecorder, LineRecorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor, proxy = servers
    looks: list[Any] = []
    real = requests.sessions.get_environ_proxies

    def counted(*args: Any, **kwargs: Any) -> Any:
        looks.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    url = f"http://127.0.0.2:{vendor.port}/jobs"
    for _ in range(3):
        assert _get(url).status_code == 200
    # Only this test's traffic counts: a daemon thread an earlier test left behind in this process
    # may send through the same environment while the proxy listens.
    assert [line for line in proxy.lines if url in line] == [f"GET {url} HTTP/1.1"] * 3 and vendor.lines == []
    ours = [args for args in looks if str(args[0]).startswith(f"http://127.0.0.2:{vendor.port}/")]
    assert len(ours) == 1  # the environment read once for the origin, not on every call


def test_no_proxy_is_honoured_and_a_guarded_call_never_takes_the_proxy(
    servers: tuple[LineRecorder, LineRecorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor, proxy = servers
    url = f"http://127.0.0.2:{vendor.port}/jobs"
    assert _get(url, guard=AllowList.parse(f"127.0.0.2:{vendor.port}")).status_code == 200  # a callback's way
    assert (vendor.lines, proxy.lines) == (["GET /jobs HTTP/1.1"], [])
    monkeypatch.setenv("NO_PROXY", "127.0.0.2")
    connections._environment_of.cache_clear()
    assert _get(url).status_code == 200
    assert (vendor.lines, proxy.lines) == (["GET /jobs HTTP/1.1"] * 2, [])
