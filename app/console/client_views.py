"""The console's list of clients: their callback URL stripped of secrets, and how many secrets,
live API keys and origins each has, never what they are (``models.read_models.console_pages.client_rows``)."""

from __future__ import annotations

from flask import render_template

from app.console.blueprint import bp
from app.session import db_session
from models.read_models import console_pages


@bp.get("/clients")
def clients() -> str:
    return render_template("console/clients.html", items=console_pages.client_rows(db_session()))
