"""The two ways a notice reaches people: an email over SMTP, and a POST to a Slack-compatible chat
webhook. One send each, its failure reduced to our error tree; the notify task retries.

The mail server is the operator's own (settings), so SMTP does not pass the outbound guard, which
judges tenant-supplied addresses. The chat URL is the operator's too, but it is an HTTP URL like a
callback's, so it goes through the same guarded call (``workers.http.call``): a chat URL that
resolves to a private address needs ``LIAISON_OUTBOUND_ALLOW`` like any other.
"""

from __future__ import annotations

import json
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from core.classify import Failure
from core.errors import CallError, PermanentError, TransientError
from foundation.settings import Settings
from workers.http import call

#: What is read of a chat webhook's answer: only its status matters.
CHAT_MAX_RESPONSE_BYTES = 4096


def email(settings: Settings, key: str, subject: str, text: str) -> EmailMessage:
    """The message; its Message-ID comes from the notice's key, so a mail system that sees a resend
    (the send succeeded but its outcome was lost) can tell it is the same message."""
    message = EmailMessage()
    message["Subject"] = subject
    message["From"] = settings.notify_email_from
    message["To"] = ", ".join(settings.notify_email_to)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = f"<{key}@liaison.notify>"
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(text)
    return message


def send_email(settings: Settings, message: EmailMessage) -> None:
    timeout = settings.notify_timeout_s
    host, port = settings.smtp_host, settings.smtp_port
    try:
        smtp: smtplib.SMTP
        if settings.smtp_security == "tls":
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            if settings.smtp_security == "starttls":
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password)
            smtp.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        raise _by_code(min(codes, default=550), "recipients refused") from None
    except smtplib.SMTPResponseException as exc:
        raise _by_code(exc.smtp_code, type(exc).__name__) from None
    except smtplib.SMTPNotSupportedError as exc:  # e.g. STARTTLS asked of a server without it
        raise PermanentError(f"SMTP {host}:{port}: {exc}", failure=Failure.BAD_RESPONSE) from None
    except (smtplib.SMTPException, OSError) as exc:  # disconnects, refused connections, timeouts, TLS
        raise TransientError(f"SMTP {host}:{port}: {type(exc).__name__}", failure=Failure.CONNECT_ERROR) from None


def _by_code(code: int, what: str) -> CallError:
    """4xx is the server's "later" (transient); 5xx its "never" (permanent). The server's own words
    are left out: they may echo an address or a login."""
    error = TransientError if 400 <= code < 500 else PermanentError
    return error(f"SMTP {code}: {what}", status=code)


def post_chat(settings: Settings, body: dict[str, Any]) -> int:
    timeout = settings.notify_timeout_s
    response = call(
        "POST",
        settings.notify_chat_url,
        timeout=(min(5.0, timeout), timeout),
        idempotent=False,
        deadline_s=timeout,
        max_body_bytes=CHAT_MAX_RESPONSE_BYTES,
        truncate=True,
        guard=settings.outbound_allow,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "Liaison-Notify/1"},
    )
    return response.status_code
