"""Every Celery task is bounded in time, and relays have their own queue: read off the registered
tasks of a real (unconnected) Celery app, plus the adapter that turns a soft time limit into a
failed attempt. The threads pool the integration tests use cannot fire Celery's time limits."""

from __future__ import annotations

import random

import pytest
from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded

import workers.tasks.beat
import workers.tasks.cancel
import workers.tasks.channel
import workers.tasks.check
import workers.tasks.probe
import workers.tasks.relay
import workers.tasks.submission
from app import create_app
from app.celery_app import CALL_TASKS
from beat_schedule import BEAT_SCHEDULE
from core.classify import Fault, Kind
from core.retry_policy import next_delay
from foundation.settings import Settings
from models.leases import slot_names
from workers.policies import relay_policy
from workers.tasks.beat import stops_at_soft_limit
from workers.tasks.outcomes import time_limit_error

ENV = {
    "DATABASE_URL": "sqlite:///:memory:",
    "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
    "LIAISON_QUEUE": "work",
    "LIAISON_TASK_SOFT_TIME_LIMIT_S": "40",
    "LIAISON_TASK_TIME_LIMIT_S": "55",
    "LIAISON_BEAT_SOFT_TIME_LIMIT_S": "250",
    "LIAISON_BEAT_TIME_LIMIT_S": "270",
}


@pytest.fixture(scope="module")
def celery() -> Celery:
    return create_app(Settings.from_env(ENV)).extensions["celery"]


def _ours(celery: Celery) -> dict[str, Task]:
    return {name: task for name, task in celery.tasks.items() if name.startswith("liaison.")}


def test_every_task_has_soft_and_hard_limits_from_settings(celery: Celery) -> None:
    tasks = _ours(celery)
    assert set(CALL_TASKS) | {e["task"] for e in BEAT_SCHEDULE.values()} <= set(tasks)
    for name, task in tasks.items():
        assert task.soft_time_limit and task.time_limit, name
        assert task.time_limit > task.soft_time_limit, name
        if name in CALL_TASKS:
            assert (task.soft_time_limit, task.time_limit) == (40, 55), name
        else:  # beat jobs: above their run budget (reconcile stops claiming after 240 s)
            assert (task.soft_time_limit, task.time_limit) == (250, 270), name
            assert task.soft_time_limit > 240, name
    # A task nobody annotated (none in production) still has the pool-wide limits.
    assert (celery.conf.task_soft_time_limit, celery.conf.task_time_limit) == (250, 270)


def test_relays_and_vendor_calls_are_routed_to_their_own_queues(celery: Celery) -> None:
    route = celery.amqp.router.route
    for name in ("liaison.relay", "liaison.channel"):
        assert route({}, name)["queue"].name == "work.relay", name
    for name in ("liaison.submit", "liaison.cancel", "liaison.probe"):
        assert route({}, name)["queue"].name == "work.calls", name
    for name in ("liaison.sweep_outbox", "liaison.reconcile", "liaison.dispatch", "liaison.notify"):
        assert route({}, name)["queue"].name == "work", name
    assert [q.name for q in celery.conf.task_queues] == ["work", "work.relay", "work.calls"]


def test_every_queue_dead_letters_like_the_work_queue_on_rabbitmq() -> None:
    env = {**ENV, "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"}
    queues = create_app(Settings.from_env(env)).extensions["celery"].conf.task_queues
    for queue in queues:
        assert queue.queue_arguments == {"x-dead-letter-exchange": "work.dlx", "x-dead-letter-routing-key": "work.dead"}


def test_a_soft_time_limit_is_a_failed_attempt_that_is_retried() -> None:
    exc = time_limit_error(40)
    assert exc.kind is Kind.TRANSIENT and "soft time limit (40s)" in str(exc)
    assert exc.fault() == Fault.SYSTEM
    # retried per the relay policy, like any other transient failure, until the attempts run out
    policy = relay_policy(Settings.from_env({}))
    assert next_delay(1, policy, random.Random(1), elapsed_s=45, retry_after_s=exc.retry_after_s) is not None
    assert next_delay(policy.max_attempts, policy, random.Random(1), elapsed_s=45) is None


def test_a_beat_job_cut_off_by_its_soft_limit_ends_quietly() -> None:
    ran = []

    @stops_at_soft_limit
    def job() -> int:
        ran.append(1)
        raise SoftTimeLimitExceeded()

    assert job() is None and ran == [1]
    assert stops_at_soft_limit(lambda: 7)() == 7


def test_relay_slots_are_named_per_client() -> None:
    assert slot_names("relay:client:7", 2) == ["relay:client:7:0", "relay:client:7:1"]
    assert workers.tasks.relay.slot_group(7) != workers.tasks.relay.slot_group(17)
    assert not set(slot_names(workers.tasks.relay.slot_group(1), 3)) & set(
        slot_names(workers.tasks.relay.slot_group(11), 3)
    )
