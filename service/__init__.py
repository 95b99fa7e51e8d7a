"""The service layer: Liaison's use cases, over the tables in ``models``.

Every write to the tables is decided by a module here, inside the caller's transaction (the caller
commits once; the outbox rows it wrote are published after the commit by ``models.publishing``);
what it writes of an outbox row's life, a task's timeline entries, a relay's slots, fair
dispatch's statements, and the statements that differ between PostgreSQL and SQLite, it asks of
the store (``models.store.store_of(session)``: verbs, never the dialect's name; the statements it
still builds itself are counted by ``tests/unit/test_service_statements.py``, and may only fall):
a submission (``intake``), a state change (``transitions``), what vendors tell us
(``vendor_events``), the lifecycle beyond the happy path (``lifecycle``, ``probes``,
``reconciliation``, ``orphans``), repair (``dead_letters``, ``operator_actions``), fair dispatch
(``admission``, ``dispatch``), callbacks in order (``ordering``, ``progress``), credentials, incidents
and the notices they cause (``notices``: beat's dispatch), retention. What the views, the CLI and
the gauges read is not here: the read models are a room of their own, ``models.read_models``.

Callers (the Flask app, the CLI, the workers) import the module they need; nothing here imports
them, a web framework or a broker.
"""
