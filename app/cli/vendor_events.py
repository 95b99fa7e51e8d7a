"""``flask --app app liaison vendor-events``: consume the events of every ``amqp`` provider
(the Procfile's ``vendor-events`` process; workers.vendor_queue)."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click
from flask import current_app
from flask.cli import AppGroup, with_appcontext

from app import startup
from workers.runtime import liaison
from workers.vendor_queue import VendorEventConsumer, amqp_providers


def register(group: AppGroup) -> None:
    group.add_command(vendor_events)


@click.command("vendor-events")
@with_appcontext
def vendor_events() -> None:
    """Consume amqp vendors' events from their reply queues until SIGTERM or Ctrl-C. Each is acked
    after its transaction committed; one that fails verification or parsing goes to <queue>.dead."""
    ctx = liaison()
    providers = amqp_providers(ctx)
    if not providers:
        click.echo("no amqp provider is configured (LIAISON_PROVIDER_<NAME>_KIND=amqp): nothing to consume")
        return
    # Like web, worker and beat: the database and our broker (relays go out through it) answer, or
    # one line and exit 69. A vendor's broker that does not answer is waited for: kombu reconnects.
    startup.check_services(ctx.settings)
    consumers = [VendorEventConsumer(ctx, ps) for ps in providers]
    app = current_app._get_current_object()  # type: ignore[attr-defined]

    stopped: set[str] = set()

    def run(consumer: VendorEventConsumer) -> None:
        with app.app_context():
            consumer.run()
        stopped.add(consumer.ps.name)  # not reached when run() raised (threading prints it)

    def stop(signum: int, frame: FrameType | None) -> None:
        for consumer in consumers:
            consumer.should_stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [threading.Thread(target=run, args=(c,), name=f"vendor-events-{c.ps.name}") for c in consumers]
    for thread in threads:
        thread.start()
    click.echo(f"consuming {', '.join(f'{c.ps.name} ({c.ps.reply_queue})' for c in consumers)}")
    while all(t.is_alive() for t in threads):  # until SIGTERM, or one consumer fails
        threads[0].join(timeout=0.5)
    stop(signal.SIGTERM, None)  # one failed: the process ends, and a process manager restarts it whole
    for thread in threads:
        thread.join()
    failed = sorted(c.ps.name for c in consumers if c.ps.name not in stopped)
    if failed:  # the unacked message is redelivered to the process that takes over
        raise click.ClickException(f"vendor-events stopped on an error for {', '.join(failed)}")
