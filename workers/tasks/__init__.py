"""Thin Celery tasks with stable names (``liaison.submit``, ``liaison.relay`` …): parse, call the
service, commit; publishing happens after the commit (``models.publishing``). Every outbox task runs
the one skeleton in ``attempt`` (start → call → record) and its failures through ``outcomes``.

Callers enqueue by name through the outbox, never by importing a task; ``app.celery_app`` imports
the modules so that the worker registers them.
"""
