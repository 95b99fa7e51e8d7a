"""A worker's remote-control mailbox can be declared again while the broker still holds it for the
worker's previous connection, as a RabbitMQ cluster does for a moment after the node a worker was
connected to stops (celeryconfig.py, ``control_queue_exclusive``).

bin/cluster-sim found it: a RabbitMQ node restarted, every worker, calls and relay process connected to
it reconnected to another node within milliseconds, declared its mailbox ``<name>.celery.pidbox`` there,
got ``RESOURCE_LOCKED - cannot obtain exclusive access to locked queue`` (the cluster still listed the
queue as the dead connection's, exclusively), which Celery takes as unrecoverable: each process exited.
Here the previous connection is simply still open, on the suite's RabbitMQ: the same declaration, the
same lock, one node."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from kombu import Connection, Consumer

from tests.integration import services


def _listen(app: Celery, connection: Connection, name: str) -> Consumer:
    """What a worker's pidbox step does at start and at every reconnect (celery.worker.pidbox)."""
    node = app.control.mailbox.Node(name, channel=connection.channel())
    return node.listen(callback=lambda body, message: None)


def test_a_worker_declares_its_mailbox_while_its_previous_connection_still_holds_it() -> None:
    services.require(services.RABBITMQ_URL, "RabbitMQ")
    app = Celery("mailbox")
    app.config_from_object("celeryconfig")
    app.conf.broker_url = services.RABBITMQ_URL
    name = f"relay@mailbox-{uuid.uuid4().hex[:10]}"
    with app.connection_for_write() as previous, app.connection_for_write() as reconnected:
        before = _listen(app, previous, name)
        # before the fix: amqp.exceptions.ResourceLocked (405). Now kombu says the mailbox is in use
        # (the price: two live workers of one name would share it, warned, not stopped)
        with pytest.warns(UserWarning, match="already using this process mailbox"):
            after = _listen(app, reconnected, name)
        assert after.queues is not None
        (mailbox,) = after.queues
        assert mailbox.name == f"{name}.celery.pidbox"
        before.cancel()
        after.cancel()
    # auto-delete: once its consumers are gone, so is the mailbox (nothing left behind for the next)
    with Connection(services.RABBITMQ_URL) as check:
        queue = mailbox.bind(check.channel())
        try:
            queue.queue_declare(passive=True)
            left = True
        except check.channel_errors:
            left = False
    assert not left
