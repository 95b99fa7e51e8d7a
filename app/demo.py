"""The visible demo: a pretend domain app that submits tasks to a running Liaison and follows them.

It plays the domain app end to end: creates a client, listens for signed callbacks on a local
port, submits tasks through the public API with ``liaison_client`` (what a real domain app would
install; some tasks told to fail), prints every state change as it happens, and checks each
callback's signature with the client's ``verify_callback``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shlex
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import requests
from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from liaison_client import FINAL_STATES, CallbackVerificationError, LiaisonClient, LiaisonError, verify_callback
from service.credentials import create_client
from webhooks.signing import generate_secret

SCENARIOS: list[tuple[str, dict[str, Any], str]] = [
    ("quick-report", {"complete_delay_s": 1.5}, "succeeded"),
    ("slow-report", {"complete_delay_s": 6}, "succeeded"),
    ("vendor-says-failed", {"outcome": "failed", "complete_delay_s": 2}, "failed"),
    ("rejected-input", {"reject": True}, "failed"),
    ("flaky-vendor", {"transient_failures": 2}, "succeeded"),
    ("duplicate-webhooks", {"duplicate": 3, "complete_delay_s": 2}, "succeeded"),
    ("out-of-order-webhooks", {"reorder": True, "complete_delay_s": 2}, "succeeded"),
]


#: The demo's env file holds the admin token, the Flower password and the webhook secret.
ENV_FILE_MODE = 0o600


def write_env_file(path: Path | str) -> Path:
    """Write fresh secrets for this checkout's demo to ``path`` (bin/demo runs it once), readable by
    its owner only: created 0600, never world-readable for a moment. An existing file is kept and
    tightened to 0600 (and given a metrics token if it has none). Nothing secret lives in the
    repository."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(ENV_FILE_MODE)
        if "LIAISON_METRICS_TOKEN=" not in path.read_text():  # written before /metrics needed a token
            with path.open("a") as out:
                out.write(f"LIAISON_METRICS_TOKEN={secrets.token_urlsafe(32)}\n")
        return path
    vendor_secret = generate_secret()
    text = (
        "\n".join(
            [
                "LIAISON_PROVIDERS=simulator",
                "LIAISON_PROVIDER_SIMULATOR_BASE_URL=http://127.0.0.1:5001",
                f"LIAISON_PROVIDER_SIMULATOR_WEBHOOK_SECRETS={vendor_secret}",
                "LIAISON_PROVIDER_SIMULATOR_SUBMIT_BACKOFF_BASE_S=1",
                f"SIMULATOR_WEBHOOK_SECRET={vendor_secret}",
                "LIAISON_PUBLIC_URL=http://127.0.0.1:5000",
                f"LIAISON_ADMIN_TOKEN={secrets.token_urlsafe(32)}",
                f"LIAISON_METRICS_TOKEN={secrets.token_urlsafe(32)}",
                f"FLOWER_BASIC_AUTH=admin:{secrets.token_urlsafe(24)}",
                "PYTHONUNBUFFERED=1",
            ]
        )
        + "\n"
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ENV_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


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

    click.secho(f"Submitting {len(SCENARIOS)} tasks to {web_url} (vendor: {vendor_url})", bold=True)
    expected: dict[str, str] = {}
    for name, simulate, final in SCENARIOS:
        correlation_id = f"demo-{run}-{name}"
        try:
            task = client.submit(
                {"report": name, "simulate": simulate}, correlation_id=correlation_id, idempotency_key=correlation_id
            )
        except LiaisonError as exc:
            click.secho(f"  submit {name}: {exc}", fg="red")
            return False
        expected[correlation_id] = final
        click.echo(f"  {correlation_id:<40} {task.state}, expect {final}")

    start, states = time.monotonic(), dict.fromkeys(expected, "requested")
    attempts = dict.fromkeys(expected, 0)
    click.secho("Following each task until it reaches its final state and its callback arrives:", bold=True)
    while True:
        for cid in expected:
            task = client.get(cid)
            stamp = f"  [{time.monotonic() - start:5.1f}s] {cid:<40}"
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
        return _report(expected, states, callbacks, start) and _keep_listening(keep, web_url, api_key, callbacks)
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


def _report(expected: dict[str, str], states: dict[str, str], callbacks: Callbacks, start: float) -> bool:
    """Each task's final state and callbacks, and the verdict line; True when all is as expected."""
    click.secho("\nFinal states and callbacks received by the domain app:", bold=True)
    all_ok = True
    for cid, final in expected.items():
        got = callbacks.received.get(cid, [])
        ok = states[cid] == final and "task.completed" in got
        all_ok &= ok
        click.secho(
            f"  {'OK ' if ok else 'BAD'} {cid:<40} {states[cid]:<10} callbacks: {', '.join(got) or 'none'}",
            fg="green" if ok else "red",
        )
    total = sum(len(v) for v in callbacks.received.values())
    verdict = "demo finished" if all_ok and not callbacks.bad_signatures else "demo FAILED"
    click.secho(
        f"{verdict}: {sum(s in FINAL_STATES for s in states.values())}/{len(expected)} tasks final, "
        f"{total} signed callbacks received, {callbacks.bad_signatures} with a bad signature, "
        f"{time.monotonic() - start:.1f}s",
        bold=True,
        fg="green" if all_ok else "red",
    )
    return all_ok and not callbacks.bad_signatures
