"""The endurance suite (``bin/chaos``): a whole Liaison on its own PostgreSQL cluster and redis-server,
driven with thousands of jobs while its worker, broker, database and vendor are broken on purpose.
Not a test (``bin/test`` never runs it); docs/runbook.md explains how to read its output."""
