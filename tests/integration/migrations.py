"""What the migration tests share besides their fixture (``migration_url``, in conftest): rows read
back as tuples."""

from __future__ import annotations

import sqlalchemy as sa


def rows(conn: sa.Connection, sql: str) -> list[tuple]:
    return [tuple(r) for r in conn.execute(sa.text(sql)).all()]
