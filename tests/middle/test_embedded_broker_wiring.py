"""The Celery app publishes and consumes through app/embedded_broker.py on the embedded broker."""

from __future__ import annotations

from pathlib import Path

from app import embedded_broker
from tests.middle.apps import in_process_app


def test_the_celery_app_uses_the_whole_file_transport_for_the_embedded_broker(
    migrated_template: Path, tmp_path: Path
) -> None:
    celery = in_process_app(migrated_template, tmp_path).extensions["celery"]
    assert celery.conf.broker_url.startswith("filesystem://")
    with celery.connection_for_write() as conn:
        assert isinstance(conn.default_channel, embedded_broker.Channel)


def test_a_server_broker_keeps_kombus_transport(migrated_template: Path, tmp_path: Path) -> None:
    """Only the URL's scheme picks a server broker's transport (nothing connects here): RabbitMQ's is
    kombu's; Redis's is kombu's with channels that survive their connection's release
    (app/redis_broker.py, issue 41.1: changed on purpose from kombu's own)."""
    app = in_process_app(migrated_template, tmp_path, CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672//")
    assert app.extensions["celery"].conf.broker_transport is None
    app = in_process_app(migrated_template, tmp_path, CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert app.extensions["celery"].conf.broker_transport == "app.redis_broker:Transport"
