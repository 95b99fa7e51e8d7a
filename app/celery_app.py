"""The Celery app, built the way Flask's own ``examples/celery`` does: tasks run inside the Flask
app context, configuration is applied at construction, nothing connects at import."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from celery import Celery, Task, bootsteps
from celery.signals import worker_process_init
from flask import Flask
from kombu import Exchange, Queue

from app import redis_broker, worker_memory
from app.consumers.broker_loss import RestoreHeld
from app.observability import worker_metrics
from app.observability.celery_signals import instrument
from core.queue_types import CLASSIC, QUORUM, is_sentinel_url, queue_arguments
from foundation.settings import Settings


def broker_options(settings: Settings, base: dict[str, Any]) -> dict[str, Any]:
    """Per-transport options: the embedded filesystem broker needs its shared folders, Redis
    Sentinel the name of the master it watches, quorum queues publisher confirms (a publish is
    done when the queue's quorum has it, not when one node's socket took it)."""
    options = dict(base)
    if is_sentinel_url(settings.broker_url):
        options["master_name"] = settings.redis_sentinel_master
    if is_amqp(settings) and quorum(settings):
        options["confirm_publish"] = True
    if settings.broker_url.startswith("filesystem://"):
        folder = settings.broker_folder
        for sub in ("queue", "control", "processed"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        options.update(
            data_folder_in=str(folder / "queue"),
            data_folder_out=str(folder / "queue"),
            control_folder=str(folder / "control"),
            processed_folder=str(folder / "processed"),
            store_processed=False,
            polling_interval=0.2,  # it polls a folder; the default 1 s adds a second to every hop
        )
    return options


def is_amqp(settings: Settings) -> bool:
    return settings.broker_url.split("://", 1)[0] in ("amqp", "amqps", "pyamqp")


def quorum(settings: Settings) -> bool:
    return settings.rabbitmq_queue_type == QUORUM


def work_queues(settings: Settings) -> list[Queue]:
    """The work queue (beat jobs and the rest), the relay queue and the calls queue (submit, cancel,
    probe), each apart: callbacks and vendor calls wait on other people's networks, on threads of
    their own (Procfile relay and calls), and a slow endpoint or vendor cannot hold the prefork
    worker that beat's jobs need. On RabbitMQ each dead-letters rejected messages to ``<queue>.dlx`` (one
    ``<queue>.dead`` for operators to inspect).

    Changing queue arguments later fails with PRECONDITION_FAILED: use a new queue name then.

    Quorum queues (LIAISON_RABBITMQ_QUEUE_TYPE=quorum) are replicated, carry RabbitMQ's delivery
    limit one above ours (LIAISON_MAX_DELIVERIES, counted in the database, decides first and leaves
    a dead letter operators see; the broker's catches what never reached a task), and sit behind
    topic exchanges: Celery's native delayed delivery (the ``celery_delayed_*`` exchanges, which
    hold countdowns at the broker, since a quorum queue's consumer cannot raise its prefetch for
    messages it holds) routes through no direct exchange.
    """
    arguments: dict[str, object] = {}
    limit = settings.max_deliveries + 1 if quorum(settings) else None
    if is_amqp(settings):
        dead_letter_route = {
            "x-dead-letter-exchange": f"{settings.queue}.dlx",
            "x-dead-letter-routing-key": f"{settings.queue}.dead",
        }
        arguments = queue_arguments(settings.rabbitmq_queue_type, dead_letter_route, delivery_limit=limit)
    kind = "topic" if is_amqp(settings) and quorum(settings) else "direct"
    return [
        Queue(name, Exchange(name, type=kind), routing_key=name, queue_arguments=arguments)
        for name in (settings.queue, settings.relay_queue, settings.calls_queue)
    ]


#: Tasks bounded by the per-call limits (their work is one or two outbound calls); every other
#: registered ``liaison.*`` task is a beat job, bounded by the beat limits.
CALL_TASKS = (
    "liaison.submit",
    "liaison.relay",
    "liaison.cancel",
    "liaison.probe",
    "liaison.check",
    "liaison.channel",
)
BEAT_TASKS = (
    "liaison.sweep_outbox",
    "liaison.prune_processed_messages",
    "liaison.retention",
    "liaison.check_deadlines",
    "liaison.reconcile",
    "liaison.poll",
    "liaison.flag_stale_orphans",
)


def task_routes(settings: Settings) -> dict[str, dict[str, str]]:
    """Relays (HTTP callbacks and channel events) and vendor calls (submit, cancel, probe, check) go to
    their own queues; everything else (beat's jobs, notifications) to the default work queue."""
    relay, calls = {"queue": settings.relay_queue}, {"queue": settings.calls_queue}
    routes = {"liaison.relay": relay, "liaison.channel": relay}
    return routes | dict.fromkeys(("liaison.submit", "liaison.cancel", "liaison.probe", "liaison.check"), calls)


def time_limits(settings: Settings) -> dict[str, dict[str, int]]:
    """Celery ``task_annotations``: soft and hard time limits per task (they fire in the prefork
    pool; the soft one raises ``SoftTimeLimitExceeded``, which the tasks record as a failed attempt)."""
    call = {"soft_time_limit": settings.task_soft_time_limit_s, "time_limit": settings.task_time_limit_s}
    beat = {"soft_time_limit": settings.beat_soft_time_limit_s, "time_limit": settings.beat_time_limit_s}
    return {**{name: dict(call) for name in CALL_TASKS}, **{name: dict(beat) for name in BEAT_TASKS}}


def dead_letter_queue(queue: str, queue_type: str = CLASSIC) -> Queue:
    return Queue(
        f"{queue}.dead",
        Exchange(f"{queue}.dlx", type="direct"),
        routing_key=f"{queue}.dead",
        queue_arguments=queue_arguments(queue_type),
    )


class DeadLetterQueueStep(bootsteps.StartStopStep):
    """Worker boot step (RabbitMQ): declare the exchange and queue our work queue dead-letters to,
    before the first message can be rejected. Nothing consumes it; operators inspect it."""

    requires: ClassVar[set[str]] = {"celery.worker.consumer.connection:Connection"}

    def start(self, c: Any) -> None:
        queue_type = c.app.conf.task_default_queue_type
        dead_letter_queue(c.app.conf.task_default_queue, queue_type)(c.connection.default_channel).declare()


def celery_init_app(app: Flask, settings: Settings) -> Celery:
    whole_seconds = is_amqp(settings) and quorum(settings)

    class FlaskTask(Task):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

        def apply_async(self, *args: Any, **options: Any) -> Any:
            # Native delayed delivery counts whole seconds and refuses a countdown below one
            # (kombu's calculate_routing_key): round such waits (retries of a fraction of a second) up.
            countdown = options.get("countdown")
            if whole_seconds and countdown:
                options["countdown"] = max(1, math.ceil(countdown))
            return super().apply_async(*args, **options)

    celery_app = Celery(app.name, task_cls=FlaskTask)
    celery_app.config_from_object("celeryconfig")
    celery_app.conf.update(
        broker_url=settings.broker_url,
        broker_transport_options=broker_options(settings, celery_app.conf.broker_transport_options),
    )
    if settings.broker_url.startswith("filesystem://"):
        # kombu's, with a message file that appears only when whole (app/embedded_broker.py)
        celery_app.conf.broker_transport = "app.embedded_broker:Transport"
    elif transport := redis_broker.transport_for(settings.broker_url):
        # kombu's, with channels that keep the broker's address when their connection is released:
        # without it a worker exits when Redis restarts (app/redis_broker.py, issue 41.1)
        celery_app.conf.broker_transport = transport
    celery_app.conf.update(app.config.get("CELERY", {}))
    celery_app.conf.task_default_queue = settings.queue
    # Quorum: queues Celery declares on its own (none of ours) are quorum too; the worker detects
    # our quorum queues (per-consumer QoS, native delayed delivery for countdowns).
    celery_app.conf.task_default_queue_type = settings.rabbitmq_queue_type
    celery_app.conf.worker_detect_quorum_queues = True
    celery_app.conf.task_queues = work_queues(settings)
    celery_app.conf.task_routes = task_routes(settings)
    celery_app.conf.task_annotations = time_limits(settings)
    # Any other task (none in production) is bounded too: the larger, beat-sized limits.
    celery_app.conf.task_soft_time_limit = settings.beat_soft_time_limit_s
    celery_app.conf.task_time_limit = settings.beat_time_limit_s
    celery_app.set_default()
    celery_app.flask_app = app  # the consumer reaches the database through it (app/consumers/task_messages.py)
    app.extensions["celery"] = celery_app
    instrument()  # logging stays ours, task log context, multiprocess metric files
    worker_metrics.connect()  # a worker's main process serves its host's metrics (LIAISON_WORKER_METRICS_PORT)
    worker_memory.connect()  # prefork children free what retried and failed tasks leave behind
    if is_amqp(settings):
        celery_app.steps["consumer"].add(DeadLetterQueueStep)
    # Redis: what the worker held when its broker connection broke goes back to the queues at the
    # reconnect (RabbitMQ requeues it itself); app/consumers/broker_loss.py
    celery_app.steps["consumer"].add(RestoreHeld)

    @worker_process_init.connect(weak=False)
    def _after_fork(**_: object) -> None:
        # Prefork children must not reuse the parent's pooled database connections.
        app.extensions["liaison"].db.after_fork()

    return celery_app
