"""The transactional outbox: a broker outage at request time still answers 202, and the sweep
publishes the work once the broker is back."""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import urlsplit

from flask import Flask
from sqlalchemy import select

from app import create_app
from foundation.settings import Settings
from models import OutboxMessage
from models.base import utcnow
from tests.integration.stack import Stack, liaison_env
from tests.support.servers import ServerThread
from tests.support.tcp_proxy import TcpProxy


def _web_behind_a_proxy(stack: Stack, vendor_secret: str) -> tuple[Flask, TcpProxy]:
    """A second web process whose only way to the broker goes through a proxy we can cut, so "the
    broker is down" for it while the stack's worker (and every other test) keeps its broker."""
    broker = urlsplit(stack.settings.broker_url)
    assert broker.hostname is not None
    proxy = TcpProxy(broker.hostname, broker.port or (6379 if broker.scheme == "redis" else 5672)).start()
    userinfo = broker.netloc.rpartition("@")[0]
    proxied_url = stack.settings.broker_url.replace(
        broker.netloc, f"{userinfo + '@' if userinfo else ''}127.0.0.1:{proxy.port}"
    )
    env = liaison_env(
        database_url=stack.settings.database_url,
        broker_url=proxied_url,
        vendor_url=stack.vendor_url,
        vendor_secret=vendor_secret,
        public_url=stack.settings.public_url,
    )
    env["LIAISON_VAR_DIR"] = str(stack.settings.broker_folder.parent)
    env["LIAISON_QUEUE"] = stack.queue
    env["LIAISON_OUTBOUND_ALLOW"] = stack.callback_server.url.removeprefix("http://")
    return create_app(Settings.from_env(env)), proxy


def test_broker_down_at_submit_then_delivered_after_the_sweep(stack: Stack, vendor_secret: str) -> None:
    web_app, proxy = _web_behind_a_proxy(stack, vendor_secret)
    api_key, _, path = stack.new_client()
    cid = f"outage-{uuid.uuid4().hex[:8]}"
    with ServerThread(web_app) as web:
        proxy.stop()
        response = stack.submit(api_key, {"correlation_id": cid, "input": "x"}, url=web.url)
        assert response.status_code == 202, response.text
        with stack.db.transaction() as session:
            row = session.scalars(select(OutboxMessage).where(OutboxMessage.correlation_id == cid)).one()
            assert row.dispatched_at is None and row.done_at is None
        assert stack.get(api_key, cid)["state"] == "requested"

        proxy.start()
        publisher = web_app.extensions["liaison"].publisher
        # What beat's sweep_outbox does, with the clock moved past the grace period.
        assert publisher.sweep(utcnow() + timedelta(seconds=60), grace_s=10, lease_s=1800) >= 1
        assert stack.wait_for_task(api_key, cid)["state"] == "succeeded"
        stack.callbacks.wait_for(
            lambda reqs: any(r.path == path and r.json()["type"] == "task.completed" for r in reqs), timeout=10
        )
    proxy.stop()
    web_app.extensions["liaison"].db.dispose()


def test_sweep_leaves_fresh_and_done_rows_alone(stack: Stack) -> None:
    api_key, _, _ = stack.new_client()
    cid = f"swept-{uuid.uuid4().hex[:8]}"
    assert stack.submit(api_key, {"correlation_id": cid, "input": "x"}).status_code == 202
    stack.wait_for_task(api_key, cid)
    fresh, fresh_id = stack.unpublished_task(api_key, {"input": "committed a moment ago"})

    def stamps() -> dict[int, object]:
        with stack.db.transaction() as session:
            rows = session.scalars(select(OutboxMessage).where(OutboxMessage.correlation_id.in_([cid, fresh]))).all()
            return {r.id: r.dispatched_at for r in rows}

    before = stamps()
    # Within the grace period the request that committed a row is still publishing it; done rows
    # are done. (The database is shared with other tests, so watch these rows, not the count.)
    stack.ctx.publisher.sweep(utcnow(), grace_s=10, lease_s=1800)
    assert stamps() == before and before[fresh_id] is None


def test_readyz_is_503_while_the_broker_is_stopped_and_200_when_it_returns(stack: Stack, vendor_secret: str) -> None:

    web_app, proxy = _web_behind_a_proxy(stack, vendor_secret)
    try:
        with ServerThread(web_app) as web:
            assert stack.internal("/readyz", base_url=web.url, timeout=15).status_code == 200
            proxy.stop()
            down = stack.internal("/readyz", base_url=web.url, timeout=15)
            assert down.status_code == 503 and "broker unreachable" in down.json()["detail"]
            proxy.start()
            assert stack.internal("/readyz", base_url=web.url, timeout=15).status_code == 200
    finally:
        proxy.stop()
        web_app.extensions["liaison"].db.dispose()
