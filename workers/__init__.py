"""The worker edge: Celery tasks (submit, relay, cancel, beat jobs), providers, the outbox publisher,
outbound HTTP, and the runtime context they share."""
