"""An ``amqp`` provider end to end (issue 13, point 2): Liaison publishes commands to the vendor's
queue on a real RabbitMQ, the simulator in broker mode runs the jobs and publishes signed events to
our reply queue, and the vendor-events consumer applies them like webhooks. Both databases (and,
for Liaison's own Celery broker, Redis and RabbitMQ): ``PAIRS``. Queue names are unique per module
run and deleted after."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import requests
from kombu import Connection, Producer

import simulator
from app.consumers.vendor_queues import VendorEventConsumer
from foundation.provider_settings import ProviderSettings
from models.base import utcnow
from tests.integration import services
from tests.integration.conftest import PAIRS, _stack
from tests.integration.processes import poll
from tests.integration.stack import Stack
from tests.support.servers import ServerThread
from webhooks.signing import generate_secret, sign, verify
from wire.broker_messages import encode
from workers.reconcile import reconcile

RABBIT = services.RABBITMQ_URL


@dataclass
class AmqpRig:
    stack: Stack
    sim: ServerThread
    sim_app: Any
    ps: ProviderSettings
    secret: str
    consumer: VendorEventConsumer
    thread: threading.Thread

    def submit(self, api_key: str, cid: str, input_: Any, traceparent: str | None = None) -> None:
        body = {"correlation_id": cid, "input": input_, "provider": "bus"}
        response = self.stack.submit(api_key, body, key=cid, traceparent=traceparent)
        assert response.status_code == 202, response.text

    def sim_jobs(self) -> dict[str, Any]:
        return requests.get(self.sim.url + "/_sim/jobs", timeout=5).json()

    def publish_event(self, payload: dict[str, Any], *, secret: str | None = None, message_id: str = "") -> str:
        """An event as the vendor would send it, to our reply queue, signed with ``secret``."""
        message_id = message_id or f"msg_{uuid.uuid4().hex}"
        body = encode(payload)
        headers = sign(secret or self.secret, message_id, int(time.time()), body).as_dict()
        with Connection(RABBIT) as conn:
            Producer(conn.default_channel).publish(
                body,
                exchange="",
                routing_key=self.ps.reply_queue,
                headers=headers,
                content_type="application/json",
                content_encoding="utf-8",
                message_id=message_id,
                type=payload.get("type", ""),
            )
        return message_id

    def dead_letters(self, timeout: float = 10) -> list[Any]:
        """Messages dead-lettered from the reply queue (taken off the dead queue)."""
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        with Connection(RABBIT) as conn:
            channel = conn.default_channel
            while time.monotonic() < deadline:
                message = channel.basic_get(self.ps.reply_queue + ".dead", no_ack=True)
                if message is not None:
                    got.append(message)
                    continue
                if got:
                    return got
                time.sleep(0.1)
        return got


def _delete_queues(*names: str) -> None:
    with Connection(RABBIT) as conn:
        channel = conn.default_channel
        for name in names:
            channel.queue_delete(name)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def rig(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[AmqpRig]:
    services.require(RABBIT, "RabbitMQ")
    tag = uuid.uuid4().hex[:8]
    command_queue, reply_queue = f"amqp-test-{tag}.commands", f"amqp-test-{tag}.events"
    secret = generate_secret()
    sim_app = simulator.create_app(
        {
            "SIMULATOR_WEBHOOK_SECRET": secret,
            "SIMULATOR_ACCEPT_DELAY_S": 0.1,
            "SIMULATOR_COMPLETE_DELAY_S": 0.3,
            "SIMULATOR_RETRY_BACKOFF_S": "0.1,0.2",
            "SIMULATOR_AMQP_URL": RABBIT,
            "SIMULATOR_AMQP_COMMAND_QUEUE": command_queue,
        }
    )
    broker = sim_app.extensions["simulator"].broker
    assert broker.ready.wait(10), "the simulator's command consumer did not start"
    extra = {
        "LIAISON_PROVIDERS": "sim,bus",
        "LIAISON_DEFAULT_PROVIDER": "sim",
        "LIAISON_PROVIDER_BUS_KIND": "amqp",
        "LIAISON_PROVIDER_BUS_AMQP_URL": RABBIT,
        "LIAISON_PROVIDER_BUS_COMMAND_QUEUE": command_queue,
        "LIAISON_PROVIDER_BUS_REPLY_QUEUE": reply_queue,
        "LIAISON_PROVIDER_BUS_WEBHOOK_SECRETS": f"{generate_secret()},{secret}",
        "LIAISON_PROVIDER_BUS_CALL_DEADLINE_S": "3",
        "LIAISON_PROVIDER_BUS_SUBMIT_BACKOFF_BASE_S": "0.2",
        "LIAISON_PROVIDER_BUS_SUBMIT_BACKOFF_CAP_S": "1",
    }
    stacks = _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)
    stack = next(stacks)
    ps = stack.settings.providers["bus"]
    consumer = VendorEventConsumer(stack.ctx, ps)

    def run() -> None:
        with stack.app.app_context():
            consumer.run()

    thread = threading.Thread(target=run, name="test-vendor-events", daemon=True)
    thread.start()
    assert consumer.ready.wait(10), "the vendor-events consumer did not start"
    with ServerThread(sim_app) as sim:
        yield AmqpRig(stack, sim, sim_app, ps, secret, consumer, thread)
    consumer.should_stop = True
    broker.stop()
    thread.join(10)
    next(stacks, None)  # closes the stack
    _delete_queues(command_queue, reply_queue, reply_queue + ".dead")


def test_a_task_runs_end_to_end_through_an_amqp_vendor(rig: AmqpRig) -> None:
    stack = rig.stack
    api_key, secret, path = stack.new_client()
    cid = f"amqp-{uuid.uuid4().hex[:8]}"
    traceparent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    rig.submit(api_key, cid, {"n": 1}, traceparent)

    body = stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded", body
    kinds = [e["kind"] for e in body["timeline"]]
    assert kinds[:3] == ["requested", "state.submitted", "state.accepted"], kinds
    reference = stack.reference(cid)
    assert body["outcome"] == {"result": "ok", "reference": reference}

    hits = stack.callbacks.wait_for(
        lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=10, message="two callbacks"
    )
    mine = [r for r in hits if r.path == path]
    assert [r.json()["type"] for r in mine] == ["task.accepted", "task.completed"]
    for r in mine:
        assert verify([secret], r.headers, r.body, time.time()) == r.json()["message_id"]
    # The vendor got one submit command, carrying the Idempotency-Key and the task's trace (tracing
    # is off here: the traceparent as it came), and named the job by it.
    jobs = [j for j in rig.sim_jobs()["jobs"] if j["reference"] == reference]
    assert len(jobs) == 1 and jobs[0]["job_id"] == reference and jobs[0]["idempotency_key"] == reference
    assert jobs[0]["traceparent"] == traceparent
    assert {r.headers.get("traceparent") for r in mine} == {traceparent}
    assert jobs[0]["callback_url"] == f"amqp:{rig.ps.reply_queue}"


def test_a_duplicated_vendor_event_is_applied_once(rig: AmqpRig) -> None:
    stack = rig.stack
    api_key, _, path = stack.new_client()
    cid = f"amqp-dup-{uuid.uuid4().hex[:8]}"
    rig.submit(api_key, cid, {"simulate": {"duplicate": 3}})  # every event published three times
    body = stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded"
    kinds = [e["kind"] for e in body["timeline"]]
    assert kinds.count("state.accepted") == 1 and kinds.count("state.succeeded") == 1
    stack.callbacks.wait_for(lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=10)

    def delivered() -> int:  # the simulator records a copy once it is published, the last ones after the first applied
        deliveries = [d for d in rig.sim_jobs()["deliveries"] if d["job_id"] == stack.reference(cid)]
        return len([d for d in deliveries if d["result"] == "delivered"])

    poll("six copies published", lambda: delivered() >= 6, timeout=30)
    assert delivered() == 6  # 2 events x 3 copies reached us
    time.sleep(1.0)  # a second relay, if there were one, would have arrived by now
    assert [r.json()["type"] for r in stack.callbacks.posts_to(path)] == ["task.accepted", "task.completed"]


def test_a_badly_signed_event_is_dead_lettered_not_applied(rig: AmqpRig) -> None:
    stack = rig.stack
    api_key, _, _ = stack.new_client()
    cid = f"amqp-forged-{uuid.uuid4().hex[:8]}"
    rig.submit(api_key, cid, {"simulate": {"drop": ["job.accepted", "job.completed"]}})
    stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    job_id = stack.reference(cid)
    forged = {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"forged": True}}
    message_id = rig.publish_event(forged, secret=generate_secret())
    malformed = rig.publish_event({"type": "job.exploded", "job_id": job_id})

    dead = rig.dead_letters()
    assert sorted(m.properties["message_id"] for m in dead) == sorted([message_id, malformed])
    assert json.loads(dead[0].body)["job_id"] == job_id  # kept whole, for an operator to look at
    assert stack.get(api_key, cid)["state"] == "submitted"  # nothing applied

    # A well-signed event for the same job is applied: the queue still flows past the refused ones.
    rig.publish_event({**forged, "outcome": {"real": True}})
    body = stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"real": True}


def test_reconciliation_asks_the_vendor_over_a_status_command(rig: AmqpRig) -> None:
    stack = rig.stack
    api_key, _, path = stack.new_client()
    cid = f"amqp-quiet-{uuid.uuid4().hex[:8]}"
    rig.submit(api_key, cid, {"simulate": {"drop": ["job.accepted", "job.completed"]}})
    stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    reference = stack.reference(cid)

    def finished() -> bool:
        return any(j["reference"] == reference and j["status"] == "succeeded" for j in rig.sim_jobs()["jobs"])

    deadline = time.monotonic() + 10
    while not finished():
        assert time.monotonic() < deadline, "the simulated job did not finish"
        time.sleep(0.1)
    assert stack.get(api_key, cid)["state"] == "submitted"  # both events were dropped

    report = reconcile(stack.ctx, utcnow() + timedelta(seconds=1000), sleep=lambda _: None)
    assert report.by_provider.get("bus", 0) >= 1
    body = stack.get(api_key, cid)
    assert body["state"] == "succeeded" and body["outcome"] == {"result": "ok", "reference": reference}
    hits = stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)
    assert [r.json()["state"] for r in hits if r.path == path][-1] == "succeeded"


def test_status_of_an_unknown_job_is_not_found_and_find_says_none(rig: AmqpRig) -> None:
    from core.errors import PermanentError

    provider = rig.stack.ctx.providers["bus"]
    with pytest.raises(PermanentError) as refused:
        provider.status(f"nobody-{uuid.uuid4().hex}")
    assert refused.value.status == 404
    assert provider.find(f"nobody-{uuid.uuid4().hex}") is None


def test_find_settles_an_uncertain_submit_by_the_reference(rig: AmqpRig) -> None:
    """What the submission asks after a submit whose confirm never came: the vendor has the job."""
    stack = rig.stack
    api_key, _, _ = stack.new_client()
    cid = f"amqp-find-{uuid.uuid4().hex[:8]}"
    rig.submit(api_key, cid, {"n": 3})
    stack.wait_for_task(api_key, cid)
    reference = stack.reference(cid)
    assert stack.ctx.providers["bus"].find(reference) == reference
    snapshot = stack.ctx.providers["bus"].status(reference)
    assert (snapshot.job_id, snapshot.status) == (reference, "succeeded")


def test_an_event_the_database_cannot_take_is_put_back_not_lost(rig: AmqpRig) -> None:
    """The database does not answer: the message goes back to the queue (after a pause), neither
    acked nor dead-lettered, and is there for the next try."""
    import dataclasses

    from models.db import Database

    queue = f"amqp-test-nodb-{uuid.uuid4().hex[:8]}"
    ps = dataclasses.replace(rig.ps, reply_queue=queue)

    @dataclass
    class NoDatabase:
        settings: Any
        db: Database

    broken = NoDatabase(rig.stack.settings, Database(f"postgresql+psycopg://nobody@127.0.0.1:{services.free_port()}/x"))
    pauses: list[float] = []
    consumer = VendorEventConsumer(broken, ps, sleep=pauses.append)  # type: ignore[arg-type]
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.ready.wait(10)
        message_id = AmqpRig(rig.stack, rig.sim, rig.sim_app, ps, rig.secret, consumer, thread).publish_event(
            {"type": "job.accepted", "job_id": "ref-nodb"}
        )
        deadline = time.monotonic() + 10
        while len(pauses) < 2:  # taken, put back, taken again: still not lost
            assert time.monotonic() < deadline, "the consumer never tried the message"
            time.sleep(0.05)
    finally:
        consumer.should_stop = True
        thread.join(10)
    try:
        with Connection(RABBIT) as conn:
            channel = conn.default_channel
            kept = channel.basic_get(queue, no_ack=True)
            assert kept is not None and kept.properties["message_id"] == message_id
            assert channel.basic_get(queue + ".dead", no_ack=True) is None
    finally:
        _delete_queues(queue, queue + ".dead")


def test_cancel_is_a_command_and_the_vendors_canceled_event_completes_the_task(rig: AmqpRig) -> None:
    stack = rig.stack
    api_key, _, path = stack.new_client()
    cid = f"amqp-cancel-{uuid.uuid4().hex[:8]}"
    rig.submit(api_key, cid, {"simulate": {"complete_delay_s": 60}})
    stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    url = f"{stack.web.url}/api/v1/tasks/{cid}/cancel"
    response = requests.post(url, json={}, headers={"Authorization": f"Bearer {api_key}"}, timeout=5)
    assert response.status_code == 202, response.text
    done = stack.wait_for_task(
        api_key, cid, until=lambda b: b["state"] == "canceled" and "cancel.sent" in [e["kind"] for e in b["timeline"]]
    )
    assert done["outcome"] == {"reason": "canceled"}
    job = next(j for j in rig.sim_jobs()["jobs"] if j["reference"] == stack.reference(cid))
    assert job["status"] == "canceled"
    stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json().get("state") == "canceled" for r in reqs), timeout=10
    )


def test_an_event_that_overtakes_the_submission_is_bound_when_it_commits(rig: AmqpRig) -> None:
    """Late binding, as for webhooks: an event for a job id no task has yet is kept as an orphan and
    applied once the submission records that job id."""
    from sqlalchemy import select

    from models import OutboxMessage

    stack = rig.stack
    api_key, _, _ = stack.new_client()
    cid = f"amqp-early-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "provider": "bus", "input": {"simulate": {"drop": ["job.accepted"]}}}
    cid, outbox_id = stack.unpublished_task(api_key, body)
    rig.publish_event({"type": "job.accepted", "job_id": stack.reference(cid)})  # before the vendor has it

    def orphaned() -> bool:
        from models.attention import OrphanEvent

        with stack.db.transaction() as session:
            return (
                session.scalar(select(OrphanEvent).where(OrphanEvent.vendor_job_id == stack.reference(cid))) is not None
            )

    deadline = time.monotonic() + 10
    while not orphaned():
        assert time.monotonic() < deadline, "the early event was not kept"
        time.sleep(0.1)
    with stack.db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
    assert row is not None
    stack.ctx.publisher.publish([row])
    done = stack.wait_for_task(api_key, cid)
    assert done["state"] == "succeeded"
    accepted = next(e for e in done["timeline"] if e["kind"] == "state.accepted")
    assert accepted["detail"].get("bound") is True


def test_a_missing_command_queue_or_a_silent_vendor_is_a_transient_failure(rig: AmqpRig) -> None:
    """Nothing is sent to a queue that does not exist (mandatory routing), and a status nobody answers
    ends at the call deadline: both transient, so the retry policy and reconcile's next run decide."""
    import dataclasses

    from core.errors import TransientError
    from workers.providers import SubmitJob
    from workers.providers.amqp import AmqpProvider

    nowhere = f"amqp-test-nobody-{uuid.uuid4().hex[:8]}"
    adapter = AmqpProvider(dataclasses.replace(rig.ps, command_queue=nowhere, call_deadline_s=0.5))
    with pytest.raises(TransientError, match="NO_ROUTE"):
        adapter.submit(SubmitJob("ref-x", {}))
    with Connection(RABBIT) as conn:  # a queue no vendor reads
        conn.default_channel.queue_declare(nowhere, auto_delete=False)
    try:
        with pytest.raises(TransientError, match=r"no status reply within 0\.5 s"):
            adapter.status("ref-x")
    finally:
        _delete_queues(nowhere)
    down = AmqpProvider(dataclasses.replace(rig.ps, amqp_url=f"amqp://guest:guest@127.0.0.1:{services.free_port()}//"))
    with pytest.raises(TransientError, match="broker not reachable"):
        down.cancel("ref-x")


def test_the_vendor_events_command_consumes_as_a_process(rig: AmqpRig, tmp_path) -> None:
    """The Procfile's ``vendor-events`` line, as a real process: a task completes through it alone
    (the in-test consumer is stopped first), and SIGTERM ends it cleanly."""
    import os

    from tests.integration.processes import liaison_command, stop

    stack = rig.stack
    rig.consumer.should_stop = True
    rig.thread.join(10)
    settings = stack.settings
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url,
        "CELERY_BROKER_URL": settings.broker_url,
        "LIAISON_QUEUE": settings.queue,
        "LIAISON_VAR_DIR": str(tmp_path),
        "LIAISON_PROVIDERS": "bus",
        "LIAISON_PROVIDER_BUS_KIND": "amqp",
        "LIAISON_PROVIDER_BUS_AMQP_URL": RABBIT,
        "LIAISON_PROVIDER_BUS_COMMAND_QUEUE": rig.ps.command_queue,
        "LIAISON_PROVIDER_BUS_REPLY_QUEUE": rig.ps.reply_queue,
        "LIAISON_PROVIDER_BUS_WEBHOOK_SECRETS": ",".join(rig.ps.webhook_secrets),
        "LIAISON_LOG_LEVEL": "info",
    }
    proc = liaison_command("vendor-events", env)
    try:
        api_key, _, _ = stack.new_client()
        cid = f"amqp-proc-{uuid.uuid4().hex[:8]}"
        rig.submit(api_key, cid, {"n": 2})
        assert stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    finally:
        stop(proc)
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.returncode == 0, output
    assert f"consuming bus ({rig.ps.reply_queue})" in output
