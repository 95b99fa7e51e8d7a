"""How each vendor the simulator plays signs a webhook: pure functions of secret, body and time.

Written from the vendors' own documentation, not from Liaison's verifiers (``webhooks.schemes``),
so that the tests checking one against the other, and both against the vendors' published vectors
and libraries, prove something:

- Stripe: ``Stripe-Signature: t=<unix>,v1=<hex>``, the HMAC-SHA256 of ``<t>.<body>`` keyed with the
  endpoint secret's *text* (``whsec_…`` is not decoded). A re-send is signed anew, with a new ``t``.
- GitHub: ``X-Hub-Signature-256: sha256=<hex>``, the HMAC-SHA256 of the body keyed with the secret's
  text; GitHub still sends the legacy ``X-Hub-Signature: sha1=<hex>`` beside it. No timestamp.
- Standard Webhooks (the ``liaison`` personality): ``webhooks.signing.sign``, as before.
"""

from __future__ import annotations

import hashlib
import hmac


def _hex_mac(secret: str, message: bytes, algorithm: str = "sha256") -> str:
    return hmac.new(secret.encode("utf-8"), message, getattr(hashlib, algorithm)).hexdigest()


def stripe_signature(secret: str, body: bytes, timestamp: int) -> str:
    """The value of Stripe's ``Stripe-Signature`` header for ``body`` sent at ``timestamp``."""
    t = str(int(timestamp))
    return f"t={t},v1={_hex_mac(secret, t.encode('ascii') + b'.' + body)}"


def github_signature_256(secret: str, body: bytes) -> str:
    """The value of GitHub's ``X-Hub-Signature-256`` header for ``body``."""
    return "sha256=" + _hex_mac(secret, body)


def github_signature_sha1(secret: str, body: bytes) -> str:
    """The legacy ``X-Hub-Signature`` GitHub sends beside the SHA-256 one (receivers should not use it)."""
    return "sha1=" + _hex_mac(secret, body, "sha1")
