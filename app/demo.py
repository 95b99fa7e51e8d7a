"""The visible demo: a pretend domain app that submits tasks to a running Liaison and follows them.

It plays the domain app end to end: creates a client, listens for signed callbacks on a local
port, submits tasks through the public API with ``liaison_client`` (what a real domain app would
install; some tasks told to fail), prints every state change as it happens, and checks each
callback's signature with the client's ``verify_callback``. The default provider gets the seven
``SCENARIOS``; every other configured provider (bin/demo's Stripe-shaped and polled vendors,
``app.demo_env``) gets the ``ELSEWHERE`` ones, so one run shows each vendor's tasks reaching their
final state; the last line counts them per provider.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import click
import requests
from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from app.demo_env import write_env_file
from liaison_client import FINAL_STATES, CallbackVerificationError, LiaisonClient, LiaisonError, verify_callback
from service.credentials import create_client

SCENARIOS: list[tuple[str, dict[str, Any], str]] = [
    ("quick-report", {"complete_delay_s": 1.5}, "succeeded"),
    ("slow-report", {"complete_delay_s": 6}, "succeeded"),
    ("vendor-says-failed", {"outcome": "failed", "complete_delay_s": 2}, "failed"),
    ("rejected-input", {"reject": True}, "failed"),
    ("flaky-vendor", {"transient_failures": 2}, "succeeded"),
    ("duplicate-webhooks", {"duplicate": 3, "complete_delay_s": 2}, "succeeded"),
    ("out-of-order-webhooks", {"reorder": True, "complete_delay_s": 2}, "succeeded"),
]
#: What each provider but the default is sent: the simulator's knobs work whichever vendor it plays.
ELSEWHERE: list[tuple[str, dict[str, Any], str]] = [
    ("report", {"complete_delay_s": 2, "progress": [50]}, "succeeded"),
    ("vendor-says-failed", {"outcome": "failed", "complete_delay_s": 2}, "failed"),
]

__all__ = ["ELSEWHERE", "SCENARIOS", "run_demo", "write_env_file"]


@dataclass(frozen=True)
class Planned:
    correlation_id: str
    provider: str
    simulate: dict[str, Any]
    final: str


def plan(run: str, providers: list[str], default: str | None) -> list[Planned]:
    """The demo's tasks: ``SCENARIOS`` on the default provider (the first, when none is), ``ELSEWHERE``
    on each other one."""
    main = default or providers[0]
    tasks = [Planned(f"demo-{run}-{name}", main, simulate, final) for name, simulate, final in SCENARIOS]
    for provider in (p for p in providers if p != main):
        tasks += [Planned(f"demo-{run}-{provider}-{n}", provider, sim, final) for n, sim, final in ELSEWHERE]
    return tasks


@dataclass
class Callbacks:
    """What the pretend domain app received, keyed by correlation id. ``announce``: print each one
    as it arrives (after the demo, while ``--keep`` leaves the domain app listening)."""

    secret: str
    received: dict[str, list[str]] = field(default_factory=dict)
    bad_signatures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    announce: bool = False

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        body = request.get_data()
        try:
            callback = verify_callback([self.secret], request.headers, body)
        except CallbackVerificationError:
            with self.lock:
                self.bad_signatures += 1
            return Response(status=401)(environ, start_response)
        with self.lock:
            self.received.setdefault(callback.correlation_id, []).append(callback.type)
            if self.announce:
                click.echo(f"  domain app: {callback.type} for {callback.correlation_id} (signature verified)")
        return Response(status=204)(environ, start_response)


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        """The demo prints what the callbacks mean; the access log would only be noise."""


def _create_client(app: Flask, callback_url: str) -> tuple[str, str]:
    with app.extensions["liaison"].db.transaction() as session:
        _, key, secret = create_client(session, f"demo-{uuid.uuid4().hex[:8]}", callback_url)
    return key.api_key, secret


def first_call(web_url: str, api_key: str, correlation_id: str = "my-first-task") -> tuple[str, str]:
    """The two lines a newcomer needs next, ready to paste: the demo client's API key, and a ``curl``
    that submits a task of that client, whose callback goes to the client's callback URL (the
    demo's own domain app, which prints it)."""
    body = json.dumps({"correlation_id": correlation_id, "input": {"report": "mine"}})
    key_line = f"export LIAISON_API_KEY={shlex.quote(api_key)}"
    curl_line = (
        f'curl -sS -X POST {web_url}/api/v1/tasks -H "Authorization: Bearer $LIAISON_API_KEY" '
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )
    return key_line, curl_line


def run_demo(
    app: Flask,
    *,
    web_url: str,
    vendor_url: str,
    timeout_s: int,
    callback_port: int = 5002,
    keep: threading.Event | None = None,
) -> bool:
    """Play the domain app; True when every task ended as expected with its signed callback. With
    ``keep``, then print the two lines of :func:`first_call` and go on listening for callbacks (each
    printed) until ``keep`` is set: ``bin/demo --keep``, where Ctrl-C ends it."""
    requests.get(f"{vendor_url}/healthz", timeout=5).raise_for_status()
    requests.get(f"{web_url}/healthz", timeout=5).raise_for_status()
    # A fixed port: the worker's outbound guard refuses loopback except what LIAISON_OUTBOUND_ALLOW
    # lists, and bin/demo lists exactly 127.0.0.1:<this port>.
    allow = app.extensions["liaison"].settings.outbound_allow
    if not allow.allows("127.0.0.1", callback_port, ipaddress.ip_address("127.0.0.1")):
        click.secho(
            f"LIAISON_OUTBOUND_ALLOW must list 127.0.0.1:{callback_port}, where the demo's domain app "
            "listens (bin/demo sets it)",
            fg="red",
        )
        return False
    # The WSGI app is set below, once we have the secret.
    server = make_server("127.0.0.1", callback_port, None, threaded=True, request_handler=_QuietHandler)  # type: ignore[arg-type]
    callback_url = f"http://127.0.0.1:{server.server_port}/callbacks"
    api_key, secret = _create_client(app, callback_url)
    callbacks = Callbacks(secret)
    server.app = callbacks
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = LiaisonClient(web_url, api_key, timeout=10)
    run = uuid.uuid4().hex[:6]

    settings = app.extensions["liaison"].settings
    tasks = plan(run, sorted(settings.providers), settings.default_provider)
    providers = sorted({t.provider for t in tasks}, key=[t.provider for t in tasks].index)
    click.secho(
        f"Submitting {len(tasks)} tasks to {web_url} (providers: {', '.join(providers)}; vendor: {vendor_url})",
        bold=True,
    )
    expected: dict[str, str] = {}
    provider_of: dict[str, str] = {}
    for planned in tasks:
        correlation_id = planned.correlation_id
        # Naming the default provider is the same as naming none, which is what a domain app does.
        named = planned.provider if planned.provider != settings.default_provider else None
        try:
            task = client.submit(
                {"report": correlation_id.split("-", 2)[-1], "simulate": planned.simulate},
                correlation_id=correlation_id,
                idempotency_key=correlation_id,
                provider=named,
            )
        except LiaisonError as exc:
            click.secho(f"  submit {correlation_id}: {exc}", fg="red")
            return False
        expected[correlation_id] = planned.final
        provider_of[correlation_id] = planned.provider
        click.echo(f"  {correlation_id:<44} {planned.provider:<10} {task.state}, expect {planned.final}")

    start, states = time.monotonic(), dict.fromkeys(expected, "requested")
    attempts = dict.fromkeys(expected, 0)
    click.secho("Following each task until it reaches its final state and its callback arrives:", bold=True)
    while True:
        for cid in expected:
            task = client.get(cid)
            stamp = f"  [{time.monotonic() - start:5.1f}s] {cid:<44}"
            if task.state == "requested" and task.next_attempt_at and task.attempts != attempts[cid]:
                click.echo(
                    f"{stamp}   retrying: attempt {task.attempts} failed ({task.last_error}),"
                    f" next at {task.next_attempt_at.isoformat()}"
                )
            attempts[cid] = task.attempts
            if task.state != states[cid]:
                click.echo(f"{stamp} {states[cid]:>10} -> {task.state}")
                states[cid] = task.state
        with callbacks.lock:
            done = all(
                states[c] in FINAL_STATES and "task.completed" in callbacks.received.get(c, []) for c in expected
            )
        if done or time.monotonic() - start > timeout_s:
            break
        time.sleep(0.5)
    client.close()
    try:
        report = _report(expected, provider_of, providers, states, callbacks, start)
        return report and _keep_listening(keep, web_url, api_key, callbacks)
    finally:
        server.shutdown()


def _keep_listening(keep: threading.Event | None, web_url: str, api_key: str, callbacks: Callbacks) -> bool:
    if keep is None:
        return True
    key_line, curl_line = first_call(web_url, api_key)
    click.secho(
        "\nYour turn: the demo client's API key, and a task of your own; its signed callback comes to this"
        " domain app, which prints it (Ctrl-C stops the demo and the platform):",
        bold=True,
    )
    click.echo(key_line)
    click.echo(curl_line)
    with callbacks.lock:
        callbacks.announce = True
    keep.wait()
    return True


def _report(
    expected: dict[str, str],
    provider_of: dict[str, str],
    providers: list[str],
    states: dict[str, str],
    callbacks: Callbacks,
    start: float,
) -> bool:
    """Each task's final state and callbacks, and the verdict line (counted per provider); True when
    all is as expected."""
    click.secho("\nFinal states and callbacks received by the domain app:", bold=True)
    ok_of: dict[str, bool] = {}
    for cid, final in expected.items():
        got = callbacks.received.get(cid, [])
        ok_of[cid] = ok = states[cid] == final and "task.completed" in got
        click.secho(
            f"  {'OK ' if ok else 'BAD'} {cid:<44} {provider_of[cid]:<10} {states[cid]:<10} "
            f"callbacks: {', '.join(got) or 'none'}",
            fg="green" if ok else "red",
        )
    all_ok = all(ok_of.values())
    total = sum(len(v) for v in callbacks.received.values())
    verdict = "demo finished" if all_ok and not callbacks.bad_signatures else "demo FAILED"
    per_provider = ", ".join(
        f"{p} {sum(ok_of[c] for c in expected if provider_of[c] == p)}/{sum(provider_of[c] == p for c in expected)}"
        for p in providers
    )
    click.secho(
        f"{verdict}: {sum(s in FINAL_STATES for s in states.values())}/{len(expected)} tasks final, "
        f"{total} signed callbacks received, {callbacks.bad_signatures} with a bad signature, "
        f"{time.monotonic() - start:.1f}s; as expected, by provider: {per_provider}",
        bold=True,
        fg="green" if all_ok else "red",
    )
    return all_ok and not callbacks.bad_signatures
