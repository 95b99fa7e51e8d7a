"""What an exported span may say (issue 44): the instrumentations record what they see -- the
requests instrumentation a callback URL whole, its ``?token=…`` included; Flask the request target
with its query string; an exception event the message that names either. Spans leave a process
for the operators' collector, so they are cleaned the way log lines are, by the same rules, in one
place every span passes: the exporter (:class:`RedactingExporter`).

- URL attributes (``http.url``, ``url.full``) become ``core.urls.strip_url`` of them:
  ``scheme://host[:port]/path``, no userinfo, query or fragment -- what incidents and the console
  show of a callback URL. A request target (``http.target``) loses its query; ``url.query`` goes.
- Any other text -- attribute, event attribute (``exception.message``, ``exception.stacktrace``)
  -- has every URL in it stripped the same way (a requests error's ``url: /cb?token=…`` too), and
  then the logs' own redaction (``foundation.logging.redact``: ``whsec_…``, ``lk_…``, ``Bearer …``,
  signatures, URL passwords).
- An attribute whose key looks secret (the logs' rule: ``…authorization``, ``…token``, a captured
  header) is masked whatever it holds.

Imported only when tracing is on (``app.observability.tracing``), so the SDK is imported here freely.

SQLAlchemy's ``db.statement`` is the statement as compiled, with placeholders: bound values are
never recorded (``enable_commenter`` stays off). Redis's is the command with ``?`` for each argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link

from core.urls import strip_url
from foundation.logging import REDACTED, SECRET_KEY, redact

#: attributes that are a whole URL
URL_KEYS = frozenset({"http.url", "url.full"})
#: attributes that are a request target: a path and maybe a query
TARGET_KEYS = frozenset({"http.target"})
#: attributes that are nothing but a query string
DROPPED_KEYS = frozenset({"url.query"})
#: a URL inside text (an error message, a stack trace)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>()\[\]{},]+")
#: urllib3/requests name the request target in their errors: ``… with url: /cb?token=abc (Caused by …)``
_TARGET_IN_TEXT = re.compile(r"(\burl: [^\s?#]*)[?#][^\s]*")


def _strip_target(target: str) -> str:
    return target.split("?", 1)[0].split("#", 1)[0]


def clean_text(text: str) -> str:
    """``text`` with every URL in it stripped and the logs' secret patterns masked."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda match: strip_url(match.group()), text)
    if "url: " in text:
        text = _TARGET_IN_TEXT.sub(r"\1", text)
    result: str = redact(text)
    return result


def clean_value(key: str, value: Any) -> Any:
    """One attribute's exported value, or None to leave the attribute out."""
    if key in DROPPED_KEYS:
        return None
    if isinstance(value, str):
        if key in URL_KEYS:
            return strip_url(value)
        if key in TARGET_KEYS:
            return _strip_target(value)
        if SECRET_KEY.search(key) and value:
            return REDACTED
        return clean_text(value)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        if SECRET_KEY.search(key) and value:
            return tuple(REDACTED for _ in value)
        return tuple(clean_value(key, item) if isinstance(item, str) else item for item in value)
    return value


def clean_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every attribute as it may be exported (left out when :func:`clean_value` says None)."""
    cleaned = {}
    for key, value in (attributes or {}).items():
        value = clean_value(key, value)
        if value is not None:
            cleaned[key] = value
    return cleaned


def cleaned_span(span: ReadableSpan) -> ReadableSpan:
    """A copy of ``span`` with its attributes, its events' and its links' cleaned."""
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=clean_attributes(span.attributes),
        events=[Event(e.name, clean_attributes(e.attributes), e.timestamp) for e in span.events],
        links=[Link(link.context, clean_attributes(link.attributes)) for link in span.links],
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """Cleans every span (:func:`cleaned_span`) before ``inner`` sends it."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([cleaned_span(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
