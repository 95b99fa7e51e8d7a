"""What the web and the workers share, below both edges: the runtime context every view, task and
CLI command reaches the platform through (``context``: settings, database, providers, publisher,
limiter, channel sender, call slots), the shared rate limits (``limiter``), the outbox publisher and
sweep (``outbox``) and the contract every vendor adapter keeps (``provider``).

Its own layer so the web (``app``) imports no part of the worker edge to read the context, check a
limit or publish after commit. The worker-only parts the context carries (the adapters, the channel
sender, the call slots) stay in ``workers``: the composition root (``app.create_app``) builds them,
and the context knows them by their contract (``provider``, the protocols in ``context``).

``app`` and ``workers`` import from here; it imports ``service`` and below, never an edge.
"""
