"""Benchmark: the amqp provider's calls against a real RabbitMQ and the simulator in broker mode.
Prints figures; asserts nothing.

    .venv/bin/python bench/amqp_provider.py                 # 200 calls each
    .venv/bin/python bench/amqp_provider.py --calls 1000 --amqp amqp://guest:guest@127.0.0.1:5672//

Times ``submit`` (connect, declare the reply queues, publish, wait for the broker's confirm) and
``status`` (the RPC: an exclusive queue, the command, the vendor's signed reply), one call at a time
as a worker makes them, and how long the vendor's two events take to reach the reply queue after a
submit. Then the vendor-events consumer drains those events into a fresh SQLite database (or
``--database`` PostgreSQL URL), migrated by the real migrations: events applied per second, one
consumer thread. Queue names are unique to the run and deleted after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tempfile
import threading

from kombu import Connection
from sqlalchemy import func, select

import simulator
from app import create_app
from app.cli import alembic_config
from app.consumers.vendor_queues import VendorEventConsumer
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings
from models.messages import ProcessedMessage
from runtime.provider import SubmitJob
from webhooks.signing import generate_secret
from workers.providers.amqp import AmqpProvider


def _figures(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[int(len(ms) * 0.95) - 1]
    return f"{name:<8} n={len(ms)}  median {statistics.median(ms):.1f} ms  p95 {p95:.1f} ms  max {ms[-1]:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument("--database", default="", help="default: a fresh SQLite file")
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    commands, replies = f"bench-{tag}.commands", f"bench-{tag}.events"
    secret = generate_secret()
    app = simulator.create_app(
        {
            "SIMULATOR_WEBHOOK_SECRET": secret,
            "SIMULATOR_ACCEPT_DELAY_S": 0,
            "SIMULATOR_COMPLETE_DELAY_S": 0,
            "SIMULATOR_AMQP_URL": args.amqp,
            "SIMULATOR_AMQP_COMMAND_QUEUE": commands,
        }
    )
    broker = app.extensions["simulator"].broker
    if not broker.ready.wait(10):
        sys.exit("the simulator's command consumer did not start")
    ps = ProviderSettings(
        name="bench",
        kind="amqp",
        base_url="",
        webhook_secrets=(secret,),
        amqp_url=args.amqp,
        command_queue=commands,
        reply_queue=replies,
    )
    provider = AmqpProvider(ps)
    try:
        submits, statuses = [], []
        references = [f"ref_{tag}_{i}" for i in range(args.calls)]
        started = time.perf_counter()
        for reference in references:
            t0 = time.perf_counter()
            provider.submit(SubmitJob(reference, {"n": 1}))
            submits.append(time.perf_counter() - t0)
        submit_window = time.perf_counter() - started
        for reference in references:
            t0 = time.perf_counter()
            provider.status(reference)
            statuses.append(time.perf_counter() - t0)
        with Connection(args.amqp) as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                depth = conn.default_channel.queue_declare(replies, passive=True).message_count
                if depth >= 2 * args.calls:
                    break
                time.sleep(0.05)
        events_at = time.perf_counter() - started
        print(_figures("submit", submits))
        print(_figures("status", statuses))
        print(f"events   {depth} of {2 * args.calls} on the reply queue {events_at:.2f} s after the first submit")
        print(f"submit throughput, one caller: {args.calls / submit_window:.0f} commands/s")
        print(_consume(args, ps, depth))
    finally:
        broker.stop()
        with Connection(args.amqp) as conn:
            for name in (commands, replies, replies + ".dead"):
                conn.default_channel.queue_delete(name)


def _consume(args: argparse.Namespace, ps: ProviderSettings, depth: int) -> str:
    """The consumer drains ``depth`` events (no task has those job ids: each is stored as an orphan,
    the same inbox insert, lookup and write as an applied event, without the relay)."""
    from alembic import command

    with tempfile.TemporaryDirectory() as tmp:
        url = args.database or f"sqlite:///{tmp}/bench.db"
        command.upgrade(alembic_config(url), "head")
        env = {
            "DATABASE_URL": url,
            "CELERY_BROKER_URL": "filesystem://localhost//",  # nothing is relayed: orphans only
            "LIAISON_VAR_DIR": tmp,
            "LIAISON_PROVIDERS": "bench",
            "LIAISON_PROVIDER_BENCH_KIND": "amqp",
            "LIAISON_PROVIDER_BENCH_AMQP_URL": args.amqp,
            "LIAISON_PROVIDER_BENCH_REPLY_QUEUE": ps.reply_queue,
            "LIAISON_PROVIDER_BENCH_COMMAND_QUEUE": ps.command_queue,
            "LIAISON_PROVIDER_BENCH_WEBHOOK_SECRETS": ps.webhook_secrets[0],
            "LIAISON_LOG_LEVEL": "warning",
        }
        settings = Settings.from_env(env)
        app = create_app(settings)
        ctx = app.extensions["liaison"]
        consumer = VendorEventConsumer(ctx, settings.providers["bench"])
        started = time.perf_counter()

        def run() -> None:
            with app.app_context():
                consumer.run()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        count = select(func.count()).select_from(ProcessedMessage)
        while True:  # every event committed (the queue's count leaves out the prefetched ones)
            with ctx.db.transaction() as session:
                if session.scalar(count) >= depth:
                    break
            time.sleep(0.02)
        consumer.should_stop = True
        thread.join(10)
        took = time.perf_counter() - started
        ctx.db.dispose()
        kind = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
        return f"consume  {depth} events into {kind} in {took:.2f} s: {depth / took:.0f} events/s, one consumer thread"


if __name__ == "__main__":
    main()
