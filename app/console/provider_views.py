"""The console's providers page: each configured provider's kind, webhook scheme, profile, poll
schedule and limits (``app.api.provider_summary``, the admin API's ``GET /admin/v1/providers``),
and its refused webhooks by reason (``liaison_webhooks_rejected_total`` as a scrape reads it).
Settings only: never a secret."""

from __future__ import annotations

from flask import render_template

from app.api.provider_summary import provider_bodies
from app.console.blueprint import bp
from foundation import metrics
from runtime.context import liaison


@bp.get("/providers")
def providers() -> str:
    settings = liaison().settings
    return render_template(
        "console/providers.html",
        items=provider_bodies(settings.providers, settings.default_provider),
        refusals=metrics.webhook_refusals(),
    )
