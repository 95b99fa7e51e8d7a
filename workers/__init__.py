"""The worker edge: Celery tasks (submit, relay, cancel, probes, notices, beat jobs) in ``tasks``, the
vendors' adapters in ``providers``, outbound HTTP (``http`` over ``transport``, ``call_deadlines`` and
``connections``), callback and channel delivery (``delivery``, ``channels``), a calls process's
share per vendor (``call_slots``), beat's jobs (``deadlines``, ``polling``, ``reconcile``) and
settings → retry policies (``policies``). What the web shares with it (the runtime context, the
rate limiter, the outbox publisher, the adapter contract) is the layer below, ``runtime``.

The composition roots in ``app`` import from here (the Flask app builds the adapters, the channel
publisher and the call slots into the runtime context; the CLI runs beat's jobs once; the vendor
queues' consumer names the AMQP adapter's reply queues); nothing here imports ``app``. Tasks are
thin: they call ``service``.
"""
