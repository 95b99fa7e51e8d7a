"""Thin Celery tasks with stable names: parse, call the core, commit, publish."""
