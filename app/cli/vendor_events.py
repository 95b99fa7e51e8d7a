"""``flask --app app liaison vendor-events``: consume the events of every ``amqp`` provider
(the Procfile's ``vendor-events`` process; app.consumers.vendor_queues)."""

from __future__ import annotations

import click
from flask.cli import AppGroup, with_appcontext

from app import startup
from app.consumers.running import run_until_stopped
from app.consumers.vendor_queues import VendorEventConsumer, amqp_providers
from runtime.context import liaison


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
    click.echo(f"consuming {', '.join(f'{c.ps.name} ({c.ps.reply_queue})' for c in consumers)}")
    failed = run_until_stopped(consumers, [c.ps.name for c in consumers], "vendor-events")
    if failed:  # the unacked message is redelivered to the process that takes over
        raise click.ClickException(f"vendor-events stopped on an error for {', '.join(failed)}")
