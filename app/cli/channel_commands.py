"""``flask --app app liaison channel-commands``: consume domain apps' commands from their broker
channels (the Procfile's ``channel-commands`` process; app.channel_commands)."""

from __future__ import annotations

import click
from flask.cli import AppGroup, with_appcontext

from app import startup
from app.consumers.command_readers import AmqpCommandConsumer, RedisCommandConsumer
from app.consumers.domain_commands import channel_clients
from app.consumers.running import run_until_stopped
from runtime.context import liaison
from wire.channel_messages import AMQP, REDIS


def register(group: AppGroup) -> None:
    group.add_command(channel_commands)


@click.command("channel-commands")
@with_appcontext
def channel_commands() -> None:
    """Consume SubmitTask/CancelTask from every channel client's command queue (RabbitMQ) or stream
    (Redis) until SIGTERM or Ctrl-C. Each is acked after its transaction committed; one that cannot
    be taken is answered by a task.rejected event. Clients put on a channel later are found within 10 s."""
    ctx = liaison()
    settings = ctx.settings
    brokers = [
        (channel, make)
        for channel, url, make in (
            (AMQP, settings.channel_amqp_url, AmqpCommandConsumer),
            (REDIS, settings.channel_redis_url, RedisCommandConsumer),
        )
        if url
    ]
    if not brokers:
        click.echo("no channel broker is set (LIAISON_CHANNEL_AMQP_URL, LIAISON_CHANNEL_REDIS_URL): nothing to consume")
        return
    # Like web, worker and beat: the database and our broker answer, or one line and exit 69. A
    # channel broker that does not answer is waited for: both consumers reconnect by themselves.
    startup.check_services(settings)
    configured = {channel for channel, _ in brokers}
    for channel in (AMQP, REDIS):
        stranded = [] if channel in configured else channel_clients(ctx, channel)
        if stranded:  # their commands would wait unread and their events fail: say so now
            raise click.ClickException(
                f"clients on the {channel} channel ({', '.join(c.name for c in stranded)}) but "
                f"LIAISON_CHANNEL_{channel.upper()}_URL is not set"
            )
    consumers: list[AmqpCommandConsumer | RedisCommandConsumer] = [make(ctx) for _, make in brokers]
    names = [f"{channel} ({len(channel_clients(ctx, channel))} clients now)" for channel, _ in brokers]
    click.echo(f"consuming commands of {'; '.join(names)}")
    failed = run_until_stopped(consumers, [channel for channel, _ in brokers], "channel-commands")
    if failed:  # the unacked command is redelivered to the process that takes over
        raise click.ClickException("channel-commands stopped on an error")
