"""The naive pipeline's Celery app: ``submit`` (POST the job to the vendor, store its id) and
``relay`` (a signed POST to the domain app). Celery's defaults otherwise: early acks, prefetch 4,
autoretry on any error (that is the naive part: no outbox, no dedup, no dead letters).

    celery -A bench.naive.tasks worker --concurrency 2 -Q <NAIVE_QUEUE>        (and -Q <queue>.relay)
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import requests
from celery import Celery
from celery.signals import worker_process_init
from sqlalchemy import select, update
from standardwebhooks import Webhook

from bench.naive.schema import engine, jobs

QUEUE = os.environ.get("NAIVE_QUEUE", "naive")
celery = Celery("naive", broker=os.environ.get("NAIVE_BROKER_URL", "memory://"))
celery.conf.update(
    task_default_queue=QUEUE,
    task_routes={"naive.relay": {"queue": QUEUE + ".relay"}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@worker_process_init.connect
def _fresh_engine(**_: object) -> None:
    engine().dispose(close=False)


@celery.task(name="naive.submit", autoretry_for=(Exception,), retry_backoff=1, max_retries=5)
def submit(job_id: int) -> None:
    with engine().connect() as conn:
        row = conn.execute(select(jobs.c.correlation_id, jobs.c.input).where(jobs.c.id == job_id)).one()
    answer = requests.post(
        os.environ["NAIVE_VENDOR_URL"] + "/jobs",
        headers={"Idempotency-Key": f"naive-{job_id}"},
        json={
            "reference": row.correlation_id,
            "input": row.input,
            "callback_url": os.environ["NAIVE_PUBLIC_URL"] + "/webhooks/bench",
        },
        timeout=10,
    )
    answer.raise_for_status()
    with engine().begin() as conn:
        conn.execute(
            update(jobs)
            .where(jobs.c.id == job_id)
            .values(vendor_job_id=answer.json()["job_id"], state="submitted", updated_at=datetime.now(UTC))
        )


@celery.task(name="naive.relay", autoretry_for=(Exception,), retry_backoff=1, max_retries=5)
def relay(event: dict[str, Any]) -> None:
    """POST ``event`` to the domain app, signed; a new message id per call (no outbox to keep one)."""
    body = json.dumps(event, separators=(",", ":"))
    msg_id = "msg_" + uuid.uuid4().hex
    now = datetime.now(UTC)
    signature = Webhook(os.environ["NAIVE_CALLBACK_SECRET"]).sign(msg_id, now, body)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "Content-Type": "application/json",
    }
    requests.post(os.environ["NAIVE_CALLBACK_URL"], data=body, headers=headers, timeout=10).raise_for_status()
