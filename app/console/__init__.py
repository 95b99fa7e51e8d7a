"""The operator console: server-rendered pages at ``/console`` for the people on call (issue 11;
docs/console.md). Views are thin: they parse a form, call ``service.operator_actions`` or a read of
``models``, and render a Jinja template. No JavaScript; nothing is fetched from elsewhere."""

from app.console.views import bp

__all__ = ["bp"]
