"""Attack suite, SSRF and tarpits (issue 8): every reproduction from the issue, against the real stack.

Each callback URL below once made the worker POST to an internal port. Listeners on loopback count
connections: after each attack the count is zero, and the answer is a 422 at submit or a ``caller``
dead letter whose reason names no address. Traffic goes to loopback only; a name that would need
DNS is answered by a stub resolver in this process (the worker runs in it).

The stack here is ``pair_stack``'s (both databases, both brokers), with one more exception in
``LIAISON_OUTBOUND_ALLOW``: the tarpit's exact port, so the tarpit test reaches it while every other
loopback port stays refused.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from models.messages import DeadLetter
from service.credentials import create_client
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack
from tests.support.listeners import CountingListener, Tarpit
from tests.support.servers import ServerThread
from workers import transport

REFUSAL = "callback URL refused by the outbound guard"


@pytest.fixture(scope="module")
def tarpit() -> Iterator[Tarpit]:
    with Tarpit(interval_s=2.0, headers=60) as pit:  # a minute of drip, were nothing to cut it off
        yield pit


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def attack_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory, tarpit: Tarpit
) -> Iterator[Stack]:
    # The tarpit test counts every attempt until the relays are dead-lettered: endpoint health would
    # pause the tarpit after 5 failures in a row (tests/integration/test_endpoint_health.py tests that),
    # so here it never pauses.
    extra = {
        "LIAISON_OUTBOUND_ALLOW": f"127.0.0.1:{tarpit.port}",
        "LIAISON_RELAY_TIMEOUT_S": "3",
        "LIAISON_ENDPOINT_FAILURES_TO_PAUSE": "1000",
    }
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    with CountingListener() as counting:
        yield counting


def client_with_callback(stack: Stack, callback_url: str) -> str:
    """A client whose registered callback URL is ``callback_url`` (the operator's, not checked at
    submit): its relays meet the guard at delivery."""
    with stack.db.transaction() as session:
        _, key, _ = create_client(session, f"attack-{uuid.uuid4().hex[:8]}", callback_url)
    return key.api_key


def poll(what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def relay_letters(stack: Stack, cid: str) -> list[DeadLetter]:
    with stack.db.transaction() as session:
        letters = session.scalars(
            select(DeadLetter).where(DeadLetter.correlation_id == cid, DeadLetter.kind == "relay")
        ).all()
        session.expunge_all()
        return list(letters)


def sim_has_job(stack: Stack, cid: str) -> bool:
    reference = stack.reference(cid)
    jobs = stack.vendor("GET", "/_sim/jobs").json()["jobs"]
    return any(job.get("reference") == reference for job in jobs)


# --- refused at submit: known without the network -------------------------------------------


SUBMIT_ATTACKS = [
    "http://127.0.0.1:{p}/",
    "http://2130706433:{p}/",
    "http://0x7f.1:{p}/",
    "http://127.1:{p}/",
    "http://0177.0.0.1:{p}/",
    "http://localhost:{p}/",
    "http://[::ffff:127.0.0.1]:{p}/",
    "http://[::1]:{p}/",
    "http://user:password@127.0.0.1:{p}/",
    "http://user:password@callbacks.example/",
    "http://evil.example\\@127.0.0.1:{p}/",
]


@pytest.mark.parametrize("template", SUBMIT_ATTACKS)
def test_an_internal_callback_url_is_refused_at_submit_and_nothing_connects(
    attack_stack: Stack, listener: CountingListener, template: str
) -> None:
    api_key, _, _ = attack_stack.new_client()
    url = template.format(p=listener.port)
    response = attack_stack.submit(api_key, {"input": {"x": 1}, "callback_url": url})
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"] == "callback_url" and error["message"].startswith(REFUSAL)
    assert str(listener.port) not in response.text and "127.0.0.1" not in response.text
    assert listener.count == 0


def test_the_simulators_reset_is_refused_at_submit(attack_stack: Stack) -> None:
    api_key, _, _ = attack_stack.new_client()
    cid = f"keep-{uuid.uuid4().hex[:8]}"
    assert attack_stack.submit(api_key, {"correlation_id": cid, "input": {"x": 1}}).status_code == 202
    poll("the simulator to have the job", lambda: sim_has_job(attack_stack, cid))
    response = attack_stack.submit(
        api_key, {"input": {"x": 1}, "callback_url": f"{attack_stack.vendor_url}/_sim/reset"}
    )
    assert response.status_code == 422 and response.json()["errors"][0]["message"].startswith(REFUSAL)
    assert sim_has_job(attack_stack, cid)  # not reset


# --- refused at delivery: a registered URL, or a name that resolves to an internal address ------


@pytest.fixture
def stub_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names the worker resolves in this test; any other name is an error, never a real lookup."""
    names: dict[str, list[str]] = {}

    def resolver(host: str, port: int) -> list[str]:
        if host not in names:
            raise AssertionError(f"unexpected lookup of {host}")
        return names[host]

    monkeypatch.setattr(transport, "system_resolver", resolver)
    return names


def _assert_refused_at_delivery(stack: Stack, api_key: str, listener: CountingListener) -> None:
    cid = f"ssrf-{uuid.uuid4().hex[:8]}"
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"x": 1}}).status_code == 202
    letters = poll("the relays to be dead-lettered", lambda: relay_letters(stack, cid))
    for letter in letters:
        assert letter.fault == "caller" and letter.attempts == 1  # refused at once: retrying sends nothing
        assert letter.error.startswith(REFUSAL)
        assert str(listener.port) not in letter.error and "127.0.0.1" not in letter.error
    task = stack.wait_for_task(api_key, cid)
    assert task["state"] == "succeeded"  # the vendor side is untouched; only the callback is refused
    last_error = poll("the task's last_error", lambda: stack.get(api_key, cid)["last_error"])
    assert last_error.startswith(REFUSAL) and str(listener.port) not in last_error
    assert sim_has_job(stack, cid)  # the simulator was not reset
    assert listener.count == 0


@pytest.mark.parametrize(
    "template",
    [
        "http://127.0.0.1:{p}/cb",
        "http://localhost:{p}/cb",
        "http://0x7f.1:{p}/cb",
        "http://u:p@127.0.0.1:{p}/cb",
        "{vendor}/_sim/reset",
    ],
)
def test_a_registered_internal_callback_url_is_a_caller_dead_letter(
    attack_stack: Stack, listener: CountingListener, template: str
) -> None:
    url = template.format(p=listener.port, vendor=attack_stack.vendor_url)
    _assert_refused_at_delivery(attack_stack, client_with_callback(attack_stack, url), listener)


def test_a_name_that_resolves_to_loopback_is_refused_at_delivery(
    attack_stack: Stack, listener: CountingListener, stub_dns: dict[str, list[str]]
) -> None:
    stub_dns["callbacks.test"] = ["127.0.0.1"]
    api_key = attack_stack.new_client()[0]
    response = attack_stack.submit(
        api_key, {"input": {"x": 1}, "callback_url": f"http://callbacks.test:{listener.port}/"}
    )
    assert response.status_code == 202  # a name: only delivery can know where it points
    cid = response.json()["correlation_id"]
    letters = poll("the relays to be dead-lettered", lambda: relay_letters(attack_stack, cid))
    assert all(letter.fault == "caller" and letter.error.startswith(REFUSAL) for letter in letters)
    assert listener.count == 0


# --- tarpit -----------------------------------------------------------------------------------


def test_a_tarpit_endpoint_is_cut_off_at_the_relay_deadline(attack_stack: Stack, tarpit: Tarpit) -> None:
    """A status line, then one header every 2 s: no read ever times out. Each relay attempt ends
    at LIAISON_RELAY_TIMEOUT_S (3 s), fails as a read timeout, is retried, and is dead-lettered."""
    before = tarpit.count
    api_key = client_with_callback(attack_stack, f"http://127.0.0.1:{tarpit.port}/cb")
    cid = f"tarpit-{uuid.uuid4().hex[:8]}"
    assert attack_stack.submit(api_key, {"correlation_id": cid, "input": {"x": 1}}).status_code == 202
    letters = poll(
        "the tarpitted relays to be dead-lettered",
        lambda: len(relay_letters(attack_stack, cid)) == 2 and relay_letters(attack_stack, cid),
        timeout=120,
    )
    max_attempts = attack_stack.settings.relay_max_attempts
    for letter in letters:
        assert letter.attempts == max_attempts and letter.fault == "system"
        assert "read_timeout" in letter.error and "deadline" in letter.error, letter.error
    attempts = 2 * max_attempts
    assert tarpit.count - before == attempts
    poll("the tarpit to see every connection closed", lambda: tarpit.closed_by_peer >= attempts, timeout=30)
    assert tarpit.served_out == 0
