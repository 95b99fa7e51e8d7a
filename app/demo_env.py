"""The demo's env file (``var/demo.env``, written by bin/demo): fresh secrets for this checkout and
the three vendors the demo connects, each the bundled simulator playing another vendor:

- ``simulator`` (the Procfile's ``vendor``, :5001): Liaison's own API and Standard Webhooks;
- ``stripe`` (Procfile.demo's ``vendor-stripe``, :5003): a Stripe-shaped API and Stripe-signed
  events, connected as an ``http`` provider through docs/profiles/simulator-stripe.toml;
- ``polled`` (Procfile.demo's ``vendor-polled``, :5004): no webhooks at all, polled
  (``POLL_SCHEDULE_S``); its scheme is ``confirm``, so nothing it could send is trusted.

Created 0600, never world-readable for a moment. An existing file keeps its secrets and is tightened
to 0600; what an older bin/demo did not write (a metrics token, the two extra vendors) is added.
Nothing secret lives in the repository."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from webhooks.signing import generate_secret

#: The demo's env file holds the admin token, the Flower password and the webhook secrets.
ENV_FILE_MODE = 0o600
#: Every provider the demo connects, the default first.
DEMO_PROVIDERS = ("simulator", "stripe", "polled")
STRIPE_PORT, POLLED_PORT = 5003, 5004


def _extra_vendors() -> list[str]:
    """The ``stripe`` and ``polled`` providers and their simulators' settings (Procfile.demo)."""
    stripe_secret = "whsec_" + secrets.token_urlsafe(24)
    return [
        f"LIAISON_PROVIDERS={','.join(DEMO_PROVIDERS)}",
        "LIAISON_DEFAULT_PROVIDER=simulator",
        "LIAISON_PROVIDER_STRIPE_KIND=http",
        "LIAISON_PROVIDER_STRIPE_PROFILE=docs/profiles/simulator-stripe.toml",
        f"LIAISON_PROVIDER_STRIPE_BASE_URL=http://127.0.0.1:{STRIPE_PORT}",
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SCHEME=stripe",
        f"LIAISON_PROVIDER_STRIPE_WEBHOOK_SECRETS={stripe_secret}",
        "LIAISON_PROVIDER_STRIPE_SUBMIT_BACKOFF_BASE_S=1",
        f"SIMULATOR_STRIPE_WEBHOOK_SECRET={stripe_secret}",
        f"SIMULATOR_STRIPE_PORT={STRIPE_PORT}",
        f"LIAISON_PROVIDER_POLLED_BASE_URL=http://127.0.0.1:{POLLED_PORT}",
        "LIAISON_PROVIDER_POLLED_WEBHOOK_SCHEME=confirm",
        "LIAISON_PROVIDER_POLLED_POLL_SCHEDULE_S=1,2",
        "LIAISON_PROVIDER_POLLED_SUBMIT_BACKOFF_BASE_S=1",
        f"SIMULATOR_POLLED_PORT={POLLED_PORT}",
    ]


def _fresh() -> list[str]:
    vendor_secret = generate_secret()
    return [
        "LIAISON_PROVIDER_SIMULATOR_BASE_URL=http://127.0.0.1:5001",
        f"LIAISON_PROVIDER_SIMULATOR_WEBHOOK_SECRETS={vendor_secret}",
        "LIAISON_PROVIDER_SIMULATOR_SUBMIT_BACKOFF_BASE_S=1",
        f"SIMULATOR_WEBHOOK_SECRET={vendor_secret}",
        *_extra_vendors(),
        "LIAISON_PUBLIC_URL=http://127.0.0.1:5000",
        f"LIAISON_ADMIN_TOKEN={secrets.token_urlsafe(32)}",
        f"LIAISON_METRICS_TOKEN={secrets.token_urlsafe(32)}",
        f"FLOWER_BASIC_AUTH=admin:{secrets.token_urlsafe(24)}",
        "PYTHONUNBUFFERED=1",
    ]


def _completed(lines: list[str]) -> list[str] | None:
    """An older file's lines with what it lacks added (None: nothing lacks)."""
    keys = {line.split("=", 1)[0] for line in lines}
    added: list[str] = []
    if "LIAISON_METRICS_TOKEN" not in keys:  # written before /metrics needed a token
        added.append(f"LIAISON_METRICS_TOKEN={secrets.token_urlsafe(32)}")
    if "LIAISON_PROVIDER_STRIPE_KIND" not in keys:  # written before the demo had three vendors
        extra = _extra_vendors()
        lines = [extra[0] if line.startswith("LIAISON_PROVIDERS=") else line for line in lines]
        added += extra[1:]
    return lines + added if added else None


def write_env_file(path: Path | str) -> Path:
    """Write fresh secrets for this checkout's demo to ``path`` (bin/demo runs it at every start),
    readable by its owner only; an existing file keeps its secrets (see the module's docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(ENV_FILE_MODE)
        completed = _completed(path.read_text().splitlines())
        if completed is not None:
            path.write_text("\n".join(completed) + "\n")  # the file is 0600 already
        return path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, ENV_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(_fresh()) + "\n")
    return path
