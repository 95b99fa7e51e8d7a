"""A naive pipeline for bench/e2e.py to measure Liaison against: the same hops (submit endpoint,
submit task, webhook view, relay task), without outbox, inbox dedup or late binding.

Configured from ``NAIVE_*`` environment variables (bench/stacks.py sets them):

- ``NAIVE_DATABASE_URL``, ``NAIVE_BROKER_URL``, ``NAIVE_QUEUE`` (relays go to ``<queue>.relay``);
- ``NAIVE_VENDOR_URL``, ``NAIVE_VENDOR_SECRET`` (verifies the vendor's webhooks);
- ``NAIVE_PUBLIC_URL`` (where the vendor posts webhooks: ``<url>/webhooks/bench``);
- ``NAIVE_CALLBACK_URL``, ``NAIVE_CALLBACK_SECRET`` (the domain app, signed callbacks);
- ``NAIVE_API_KEY`` (a bearer token compared in memory: no database lookup).
"""
