"""The HTTP API: the tasks API for domain apps (``tasks``), the vendors' webhooks (``inbound``), the
operators' admin API (``admin``, ``admin_clients``), health and readiness (``health``) and the
OpenAPI document with its reference page (``openapi*``, ``reference``).

Views are thin: they parse and validate (``validation``), call ``service``, commit, and answer in
one representation (``representation``); errors are problem+json (app/errors.py). The app factory
registers the blueprints; nothing else imports these modules.
"""
