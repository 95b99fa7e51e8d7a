"""Gunicorn's own lines (boot, worker exits, access log) in Liaison's log format.

Gunicorn gives its ``gunicorn.error`` and ``gunicorn.access`` loggers private handlers and stops
them propagating; this logger class takes those handlers away and lets the records reach the root
handler installed by :func:`foundation.logging.configure_logging`, so the web process writes
one format only. Used from ``app/gunicorn_config.py`` (``logger_class``).
"""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger


class StructuredLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)  # levels, the access-log on/off switch, and its own handlers...
        for log in (self.error_log, self.access_log):
            for handler in list(log.handlers):  # ...which we drop in favour of the root handler
                log.removeHandler(handler)
            log.propagate = True
