"""The vendor simulator: a small Flask app playing the external system for the demo and tests.

It implements the provider contract of docs/design.md §5 (jobs, cancel, lookup by reference, signed
webhooks) and can be told, per job or globally, to fail, flap, answer slowly, drop, duplicate or
reorder webhooks. All state is in memory, so run it as ONE process (threads are fine)::

    gunicorn -w 1 --threads 8 'simulator:create_app()'
    flask --app simulator run

With ``SIMULATOR_AMQP_URL`` set it is also an ``amqp`` vendor (``simulator/broker.py``): it consumes
``job.submit`` / ``job.cancel`` / ``job.status`` commands from ``SIMULATOR_AMQP_COMMAND_QUEUE`` and
publishes the same signed events to each job's reply-to queue, with the same knobs and one store, so
``/_sim/jobs`` shows both kinds of job.

``SIMULATOR_PERSONALITY`` picks the vendor it plays: ``liaison`` (the default: all of the above),
``stripe``, ``github``, ``poll-only`` or ``token-url`` (``simulator.personality`` has the table); the
knobs and the control API are the same under each.

Nothing happens at import; ``create_app`` reads the settings and fails fast on a bad secret.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from werkzeug.exceptions import HTTPException

from simulator import control, github_api, stripe_api, views
from simulator.broker import BrokerVendor
from simulator.dispatch import Dispatcher
from simulator.engine import Engine
from simulator.problems import http_error
from simulator.runtime import EXTENSION_KEY, Runtime
from simulator.settings import GITHUB, STRIPE, Settings, SettingsError, load_settings
from simulator.store import Store

__all__ = ["Settings", "SettingsError", "create_app"]


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Build a simulator app.

    ``config`` keys (else environment variables of the same name): ``SIMULATOR_WEBHOOK_SECRET``
    (``whsec_...``; its form per personality: ``simulator.settings``), ``SIMULATOR_ACCEPT_DELAY_S``
    (0.5), ``SIMULATOR_COMPLETE_DELAY_S`` (2.0), ``SIMULATOR_WEBHOOK_TIMEOUT_S`` (5),
    ``SIMULATOR_RETRY_BACKOFF_S`` (0.2,0.5,1,2: the pauses between webhook re-sends),
    ``SIMULATOR_AMQP_URL`` (unset: off; set: broker mode, see ``simulator.broker``),
    ``SIMULATOR_AMQP_COMMAND_QUEUE`` (``sim.commands``), ``SIMULATOR_PERSONALITY`` (``liaison``),
    ``SIMULATOR_WEBHOOK_URL`` (stripe, github: where their webhooks go) and
    ``SIMULATOR_CALLBACK_ORIGINS`` (token-url: where a handed callback URL may point; empty:
    loopback only) and ``SIMULATOR_WEBHOOK_BASIC_AUTH`` (``user:password``: an ``Authorization:
    Basic`` header on every webhook; empty: none). Other keys go to ``app.config`` as usual.
    Raises :class:`SettingsError` when the settings are unusable.
    """
    settings = load_settings(config)
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024
    app.config.update(config or {})

    store = Store()
    dispatcher = Dispatcher(settings, store)
    engine = Engine(settings, store, dispatcher)
    broker = None
    if settings.amqp_url:  # broker mode: also an amqp vendor, on the same jobs
        broker = BrokerVendor(settings, store, engine)
        broker.start()
    app.extensions[EXTENSION_KEY] = Runtime(settings, store, engine, broker)

    # the vendor's API, in the shapes of the vendor it plays (simulator.personality)
    api = {STRIPE: stripe_api.bp, GITHUB: github_api.bp}.get(settings.personality, views.bp)
    app.register_blueprint(api)
    app.register_blueprint(control.bp)
    app.register_error_handler(HTTPException, http_error)
    return app
