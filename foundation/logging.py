"""Structured logs: one configuration for structlog *and* the standard library.

Flask, werkzeug, Celery, gunicorn, SQLAlchemy and our own modules mostly log through stdlib
``logging``; routing every record through structlog's ``ProcessorFormatter`` makes all of them come
out in one format -- ``console`` (readable, for people) or ``json`` (one object per line, for
machines) -- with the same context: whatever was bound for the current request or Celery task
(``request_id``, ``correlation_id``, ``message_id``, ``task_id``, ``attempt``...) via contextvars,
and the task's ``trace_id`` (:func:`add_trace_id`).

Secrets never reach the output: :func:`redact_secrets` runs last before rendering, on every line,
whatever produced it, and on every value: an exception (or any other object) is redacted as the
text the renderer would show for it, a traceback as the text the exception formatter writes.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TextIO

import structlog
from structlog.contextvars import bind_contextvars, clear_contextvars, merge_contextvars
from structlog.types import EventDict, Processor, WrappedLogger

from foundation.tracing import current_trace_id

__all__ = ["bind", "clear", "configure_logging", "get_logger", "redact", "redact_secrets"]

REDACTED = "[redacted]"
#: Keys whose values are secret whatever they hold (matched anywhere in the key, any case).
SECRET_KEY = re.compile(r"secret|token|signature|authorization|api[_-]?key|password|passwd|cookie", re.I)
#: Values that are secret wherever they appear, even inside a message or a traceback.
SECRET_VALUES = (
    (re.compile(r"whsec_[A-Za-z0-9+/=_-]+"), REDACTED),  # webhook signing secrets
    (re.compile(r"(?<![A-Za-z0-9_])lk_[A-Za-z0-9_-]{16,}"), REDACTED),  # our API keys
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer " + REDACTED),
    (re.compile(r"\bv1,[A-Za-z0-9+/]{20,}={0,2}"), "v1," + REDACTED),  # Standard Webhooks signatures
    # token-url callbacks: the token in /webhooks/<provider>/t/<token> (a request's path, an access line)
    (re.compile(r"(/webhooks/[^/\s]+/t/)[^/?\s\"]+"), r"\1" + REDACTED),
    # passwords in URLs: amqp://user:pass@, postgresql+psycopg://user:pass@, redis://:pass@ (no user),
    # up to the authority's last @: a raw @ in a password is masked whole, not half
    (re.compile(r"(?<=://)([^:/\s]*):([^/\s]+)@"), r"\1:" + REDACTED + "@"),
)


#: A text none of whose pieces occur cannot match any of ``SECRET_VALUES`` (each needs one of them):
#: one search instead of five substitutions for almost every string of almost every line (an access
#: log line cost 32 µs to redact, 6 with this). It must keep up with ``SECRET_VALUES``; a property
#: test (tests/unit/test_observability_logging.py) holds the two to the same result.
MAYBE_SECRET = re.compile(r"whsec_|lk_|(?i:bearer)|v1,|://|/t/")


def redact(value: Any) -> Any:
    """A copy of ``value`` with secret-looking strings masked, recursing into containers."""
    if isinstance(value, str):
        if MAYBE_SECRET.search(value) is None:
            return value
        for pattern, replacement in SECRET_VALUES:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, Mapping):
        return {k: _redact_item(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact(v) for v in value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    # Anything else (an exception, a URL object, a datetime, a set...) is shown by the renderers as
    # its repr: an exception's carries its message, which may hold a connection URL or a token. The
    # text the renderer would have shown is redacted like any other string.
    return redact(repr(value))


def _redact_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and not key.startswith("_") and SECRET_KEY.search(key) and value not in (None, ""):
        return REDACTED
    return redact(value)


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: mask secret keys and secret-looking values on every line. An event that
    is not a string (``log.error(exc)``) is its text, as the console renderer would show it;
    ``exc_info`` is left for the exception formatter, which redacts the traceback it writes."""
    event = event_dict.get("event")
    if event is not None and not isinstance(event, str):
        event_dict = {**event_dict, "event": str(event)}
    return {k: v if k == "exc_info" else _redact_item(k, v) for k, v in event_dict.items()}


def _redacting_traceback(
    sio: TextIO, exc_info: tuple[type[BaseException], BaseException, TracebackType | None]
) -> None:
    """Console exception formatter: a plain traceback, secrets masked like everything else."""
    sio.write("\n" + redact("".join(traceback.format_exception(*exc_info))).rstrip("\n"))


def add_trace_id(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: ``trace_id`` beside ``correlation_id`` -- the current span's with tracing
    on, the task's stored trace at a seam while it is off (``foundation.tracing``), or whatever a
    view bound (the submit binds the caller's)."""
    if "trace_id" not in event_dict:
        trace_id = current_trace_id()
        if trace_id is not None:
            event_dict["trace_id"] = trace_id
    return event_dict


def _shared_processors() -> list[Processor]:
    """What every line gets, from structlog or from stdlib; ``merge_contextvars`` first so the
    request/task context is there for everything after it."""
    return [
        merge_contextvars,
        add_trace_id,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),  # stdlib ``extra={...}`` fields become keys
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


def _renderers(log_format: str, stream: TextIO) -> list[Processor]:
    if log_format == "json":
        return [
            structlog.processors.format_exc_info,  # the traceback becomes a string, then is redacted
            redact_secrets,
            structlog.processors.JSONRenderer(),
        ]
    colors = bool(getattr(stream, "isatty", lambda: False)())
    return [
        redact_secrets,
        structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=_redacting_traceback),
    ]


def configure_logging(log_format: str = "console", log_level: str = "INFO", stream: TextIO | None = None) -> None:
    """Configure structlog and the root logger; safe to call again (it replaces, never adds).

    ``log_format`` is ``console`` or ``json``; ``stream`` defaults to the process's stderr as it is
    *now* (before Celery may redirect ``sys.stderr`` into a logger, which would loop).
    """
    if log_format not in ("console", "json"):
        raise ValueError("log_format must be 'console' or 'json'")
    stream = stream or sys.stderr
    shared = _shared_processors()
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,  # the chain above never changes; only the formatter does
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_renderers(log_format, stream)],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):  # ours from an earlier call, basicConfig's, Celery's...
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(log_level.upper())
    logging.captureWarnings(True)  # warnings.warn(...) become log lines in the same format
    logging.getLogger("alembic.runtime.migration").addFilter(_drop_alembic_preamble)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # "setup plugin ..." x4


def _drop_alembic_preamble(record: logging.LogRecord) -> bool:
    """Alembic announces its dialect on every ``MigrationContext``, i.e. on every ``/readyz``."""
    return not record.getMessage().startswith(("Context impl ", "Will assume "))


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """A structlog logger: ``log.info("relay delivered", status=204)``."""
    return structlog.stdlib.get_logger(name)


def bind(**values: Any) -> None:
    """Add keys to every following line of the current request or task (None values are skipped),
    e.g. ``bind(correlation_id=task.correlation_id)`` once a view knows the task."""
    bind_contextvars(**{k: v for k, v in values.items() if v is not None})


def clear() -> None:
    """Forget the bound context (start of a request or task)."""
    clear_contextvars()
