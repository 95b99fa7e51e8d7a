"""Every broker consumer of the platform, in one room: what Liaison reads off a queue or a stream
rather than an HTTP request.

- ``vendor_queues``: an amqp vendor's events off its reply queue, through the one way in for vendor
  events (``service.ingress``, which the webhook view uses too); the ``vendor-events`` process.
- ``domain_commands`` and ``command_readers``: domain apps' commands off their channels (RabbitMQ
  queues, Redis streams), taken like the API's requests; the ``channel-commands`` process.
- ``task_messages``: the Celery worker's own consumer, which dead-letters a task message it cannot
  run instead of dropping it (``worker_consumer`` in celeryconfig.py).
- ``running``: one thread per consumer until the process is told to stop.

The CLI starts the processes (``app/cli/vendor_events.py``, ``app/cli/channel_commands.py``); each
consumer acks only after its transaction committed. Nothing below ``app`` imports this package.
"""
