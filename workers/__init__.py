"""Celery workers: submission, relay and maintenance tasks, and the policy they follow."""
