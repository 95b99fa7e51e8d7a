"""Verify a callback from Liaison with the ``standardwebhooks`` library, the scheme's reference.

Liaison signs every callback as Standard Webhooks do (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``; HMAC-SHA256 over ``id.timestamp.body``) with the client's secret. While a
secret rotates, Liaison signs with the old and the new one: pass every secret you hold, and any of
them verifies. Verify the raw body bytes exactly as received, before parsing them.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable
from typing import Protocol

from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook, WebhookVerificationError

from liaison_client.errors import CallbackVerificationError
from liaison_client.models import Callback

SECRET_PREFIX = "whsec_"


class Headers(Protocol):
    """Anything with ``items()`` of (name, value): a dict, Flask's/Werkzeug's ``Headers``,
    ``requests``' ``CaseInsensitiveDict``, Django's ``HttpHeaders``."""

    def items(self) -> Iterable[tuple[str, str]]: ...


def _webhook(secret: str) -> Webhook:
    """The library's verifier for one ``whsec_<base64>`` secret. A malformed secret is the
    caller's configuration error (ValueError), not a bad callback; its text never names the secret."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError("a callback secret must look like whsec_<base64>")
    try:
        return Webhook(secret)
    except (binascii.Error, ValueError):  # the library's base64 errors
        raise ValueError("a callback secret is not valid base64 after whsec_") from None
    except EmptyWebhookSecretError:
        raise ValueError("a callback secret is empty") from None


def verify_callback(secrets: str | Iterable[str], headers: Headers, body: bytes | str) -> Callback:
    """The verified callback, or :class:`CallbackVerificationError` (answer the request 4xx).

    ``headers`` may be a dict or a web framework's headers object (see :class:`Headers`); names are
    read case-insensitively. A timestamp more than five minutes from now is refused (replays).
    Every malformed input -- a missing header, a garbage signature, a body that is not UTF-8 --
    is a :class:`CallbackVerificationError`, never another exception.
    """
    webhooks = [_webhook(s) for s in ([secrets] if isinstance(secrets, str) else list(secrets))]
    if not webhooks:
        raise ValueError("at least one callback secret is needed")
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    reason = "no secret matched"
    for webhook in webhooks:
        try:
            webhook.verify(body, lowered, json_parse=False)
            break
        except WebhookVerificationError as exc:
            reason = str(exc)
        except ValueError:  # the library leaks binascii.Error, unpacking and UnicodeDecodeError
            reason = "malformed signature headers or body"
    else:
        raise CallbackVerificationError(f"callback signature rejected: {reason}")
    try:
        data = json.loads(body)
        return Callback.from_json(lowered["webhook-id"], int(float(lowered["webhook-timestamp"])), data)
    except (ValueError, TypeError, KeyError) as exc:
        raise CallbackVerificationError(f"signed, but not a Liaison callback: {exc}") from None
