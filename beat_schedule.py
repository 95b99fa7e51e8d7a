"""The beat schedule as data: stable keys, stable task names (checked against the registered tasks
by a test). Every job is safe to run twice or overlapping (DESIGN §7)."""

from datetime import timedelta

BEAT_SCHEDULE = {
    "sweep-outbox": {"task": "liaison.sweep_outbox", "schedule": timedelta(seconds=30)},
    "prune-processed-messages": {
        "task": "liaison.prune_processed_messages",
        "schedule": timedelta(hours=1),
    },
}
