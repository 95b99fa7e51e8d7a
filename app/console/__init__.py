"""The operator console: server-rendered pages at ``/console`` for the people on call (issue 11;
docs/console.md). Views are thin: they parse a form, call ``service.operator_actions`` or a read
model (``models.read_models``: ``overview``, ``lists``, ``console_pages``, ``task_page``), and
render a Jinja template. No JavaScript; nothing is fetched from elsewhere.

``bp`` (``app/console/blueprint.py``) is the one blueprint; each ``*_views`` module registers its
pages on it when imported, here."""

from app.console import (  # noqa: F401 (each registers its pages on bp)
    attention_views,
    client_views,
    dead_letter_views,
    overview_views,
    provider_views,
    sign_in_views,
    task_views,
)
from app.console.blueprint import bp

__all__ = ["bp"]
