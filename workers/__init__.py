"""The worker edge: Celery tasks (submit, relay, cancel, probes, notices, beat jobs) in ``tasks``, the
vendors' adapters in ``providers``, the outbox publisher and sweep (``outbox``), outbound HTTP
(``http`` over ``transport``, ``call_deadlines`` and ``connections``), callback and channel delivery
(``delivery``, ``channels``), the shared rate limits (``limiter``) and the runtime context every task
and view reaches the platform through (``runtime``).

The composition roots in ``app`` import from here (the Celery app registers ``tasks``, the Flask app
builds the ``runtime``); nothing here imports ``app``. Tasks are thin: they call ``service``.
"""
