"""Celery settings that are policy, each with the reason it is set. The broker URL and its
per-transport options come from ``foundation.settings`` (see ``app.celery_app``)."""

from beat_schedule import BEAT_SCHEDULE
from foundation.settings import VISIBILITY_TIMEOUT_S

# --- Reliability (docs/design.md §1) ---
# Ack only after the task body ran: a worker that dies mid-task leaves the message to be redelivered.
task_acks_late = True
# With acks_late alone a killed child is still acked (lost); this puts the message back instead.
task_reject_on_worker_lost = True
# Tasks are long network I/O: take one message at a time so idle workers can take the rest.
worker_prefetch_multiplier = 1
# Redis redelivers a message unacked this long; it must outlast the longest countdown, which
# LIAISON_MAX_COUNTDOWN_S keeps far below it (longer waits are held in the database).
broker_transport_options = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
# The code default (None) falls back to broker_connection_retry and warns; say what we mean.
broker_connection_retry_on_startup = True
# A lost broker connection means unacked messages come back: stop running them rather than run twice.
# (The prefork pool kills them; the threads pool cannot, so there they run on and their acks fail:
# their messages run again, which our tasks' outbox claim makes harmless.)
worker_cancel_long_running_tasks_on_connection_loss = True
# After a reconnect Celery would lower the prefetch count by the tasks still running, and raise it
# again as each one acks. On the threads pool that raise (a basic.qos round trip) runs in the task's
# thread, on the consumer's connection, while the event loop reads the same socket: the AMQP frames
# interleave, the loop reads a garbage frame header (a "frame" of 198 MB) and waits for it forever,
# and the worker stays up but consumes nothing again (a RabbitMQ restart under load, issue 41.1).
# Off: the prefetch count stays what it was. The prefork pool loses nothing (the cancel above
# ended its running tasks); a threads pool may take up to twice its threads' worth for a while,
# queued in the process until the old tasks end.
worker_enable_prefetch_count_reduction = False
# A worker's remote-control mailbox (``<name>.celery.pidbox``) is not an exclusive queue. On a RabbitMQ
# cluster, a node that stops drops its connections, and each worker reconnects to another node within
# milliseconds, while the cluster still lists its mailbox as held by the connection that just died:
# declaring an exclusive queue then fails with RESOURCE_LOCKED, which Celery takes as unrecoverable, and
# the worker exits (bin/cluster-sim, a node restarted: every relay, calls and worker process connected
# to it ended). Not exclusive, the mailbox is still deleted when its last consumer goes (auto-delete)
# and expires 10 s after (control_queue_expires), and the reconnected worker declares it again at once.
# The price: a second worker started under the same node name shares the mailbox (kombu warns "A node
# named ... is already using this process mailbox") instead of stopping at start.
control_queue_exclusive = False
# Never run tasks in-process: tests use a real worker (celery.contrib.testing).
task_always_eager = False

# --- Messages ---
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
# All state lives in our database; no result backend to run or to fill.
task_ignore_result = True
# The work queue's name comes from settings (LIAISON_QUEUE); app.celery_app declares it, with a
# dead-letter exchange on RabbitMQ. Unknown and undecodable messages are dead-lettered by our consumer.
worker_consumer = "app.consumers.task_messages:DeadLetteringConsumer"
# Relays and vendor calls run on queues of their own (LIAISON_RELAY_QUEUE, LIAISON_CALLS_QUEUE:
# task_routes), consumed by the Procfile's threads-pool lines, and
# every task has soft and hard time limits (task_annotations): both come from settings and are set
# by app.celery_app. The soft limit raises SoftTimeLimitExceeded in the task, which records a
# failed attempt (retried per policy); the hard one kills the pool process (prefork only: the
# threads and solo pools cannot enforce either).
timezone = "UTC"
enable_utc = True

# --- Visibility for Flower ---
# Task events are broker messages: three per task (received, started, succeeded), nine per job, and
# a "sent" one from the web for every publish. Workers send none until a monitor asks for them:
# Flower turns them on when it starts and every few seconds after (its enable_events option, on by
# default), so a deploy watched by Flower sees every task from "received" on, and one that is not
# pays nothing. Worker heartbeats (online/offline in Flower) are sent either way.
worker_send_task_events = False
task_send_sent_event = False

# --- What the worker and beat load ---
imports = (
    "workers.tasks.submission",
    "workers.tasks.relay",
    "workers.tasks.channel",
    "workers.tasks.cancel",
    "workers.tasks.notify",
    "workers.tasks.probe",
    "workers.tasks.check",
    "workers.tasks.beat",
)
beat_schedule = BEAT_SCHEDULE
# Celery's file-backed scheduler, plus a heartbeat row written at every tick (beat liveness, issue 12).
beat_scheduler = "app.beat:HeartbeatScheduler"
