"""The beat schedule as data: stable keys, stable task names (checked against the registered tasks
by a test). Every job is safe to run twice or overlapping (docs/design.md §7): each claims its rows."""

from datetime import timedelta

BEAT_SCHEDULE = {
    "check-deadlines": {"task": "liaison.check_deadlines", "schedule": timedelta(seconds=60)},
    # polled providers' due polls, and confirm hints that came while a check was out (workers/polling.py)
    "poll": {"task": "liaison.poll", "schedule": timedelta(seconds=5)},
    "reconcile": {"task": "liaison.reconcile", "schedule": timedelta(minutes=5)},
    "sweep-outbox": {"task": "liaison.sweep_outbox", "schedule": timedelta(seconds=30)},
    # queued submissions with room are released as room frees; this catches any release a race missed
    "dispatch-queued": {"task": "liaison.dispatch", "schedule": timedelta(seconds=5)},
    "dispatch-notifications": {"task": "liaison.dispatch_notifications", "schedule": timedelta(seconds=10)},
    # every kind of finished work past its retention, processed messages included (service/retention.py)
    "retention": {"task": "liaison.retention", "schedule": timedelta(hours=1)},
    "flag-stale-orphans": {"task": "liaison.flag_stale_orphans", "schedule": timedelta(minutes=5)},
}
