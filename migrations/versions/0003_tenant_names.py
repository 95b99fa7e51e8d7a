"""per-tenant names and state: correlation ids unique per client, a global vendor reference,
callback endpoints disabled per (client, url)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:00:00

Data:
- ``external_tasks.reference`` is backfilled with the correlation id (globally unique until now), so
  jobs in flight keep the reference and Idempotency-Key the vendor already knows.
- ``callback_endpoints`` rows get the client(s) whose parked relays wait on them; a row with none
  goes to each client whose callback_url is that URL; a row matching no client is dropped (it paused
  nothing that can be released). ``url`` was the whole URL: it becomes the stripped form (no
  userinfo, query or fragment), and ``outbox_messages.target`` likewise.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _strip(url: str) -> str:
    # The migration keeps its own copy of core.urls.strip_url: migrations must not change when
    # the application code does.
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except (ValueError, TypeError, AttributeError):
        return "(invalid URL)"
    if not parts.scheme or not host:
        return "(invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, "", ""))


def upgrade() -> None:
    conn = op.get_bind()

    # --- external_tasks: reference, and correlation ids unique per client ---
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reference", sa.String(length=200), nullable=True))
    conn.execute(sa.text("UPDATE external_tasks SET reference = correlation_id"))
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.alter_column("reference", existing_type=sa.String(length=200), nullable=False)
        batch_op.drop_constraint("uq_external_tasks_correlation_id", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_external_tasks_correlation_id_client_id"), ["correlation_id", "client_id"]
        )
        batch_op.create_unique_constraint(batch_op.f("uq_external_tasks_reference"), ["reference"])

    # --- callback_endpoints: keyed by (client, url) ---
    with op.batch_alter_table("callback_endpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("client_id", Id, nullable=True))
        batch_op.drop_constraint("uq_callback_endpoints_url_hash", type_="unique")
    columns = "url_hash, url, disabled_at, disabled_reason, enabled_at"
    e_columns = ", ".join(f"e.{c.strip()}" for c in columns.split(","))
    # 1. every client with relays parked on the endpoint (so each can still be released)
    conn.execute(
        sa.text(
            f"INSERT INTO callback_endpoints (client_id, {columns}) "
            f"SELECT DISTINCT t.client_id, {e_columns} FROM callback_endpoints e "
            "JOIN outbox_messages o ON o.target = e.url AND o.parked_reason = 'endpoint_gone' AND o.done_at IS NULL "
            "JOIN external_tasks t ON t.id = o.task_id "
            "WHERE e.client_id IS NULL"
        )
    )
    # 2. else every client whose callback_url it is
    conn.execute(
        sa.text(
            f"INSERT INTO callback_endpoints (client_id, {columns}) "
            f"SELECT c.id, {e_columns} FROM callback_endpoints e JOIN clients c ON c.callback_url = e.url "
            "WHERE e.client_id IS NULL AND NOT EXISTS ("
            "  SELECT 1 FROM callback_endpoints n WHERE n.client_id IS NOT NULL AND n.url_hash = e.url_hash)"
        )
    )
    conn.execute(sa.text("DELETE FROM callback_endpoints WHERE client_id IS NULL"))
    # What is shown and stored outside the task: the stripped URL (url_hash stays the whole URL's).
    for endpoint_id, url in conn.execute(sa.text("SELECT id, url FROM callback_endpoints")).all():
        if _strip(url) != url:
            conn.execute(
                sa.text("UPDATE callback_endpoints SET url = :u WHERE id = :i"), {"u": _strip(url), "i": endpoint_id}
            )
    targets = (
        conn.execute(sa.text("SELECT DISTINCT target FROM outbox_messages WHERE target IS NOT NULL")).scalars().all()
    )
    for target in targets:
        if _strip(target) != target:
            conn.execute(
                sa.text("UPDATE outbox_messages SET target = :s WHERE target = :t"), {"s": _strip(target), "t": target}
            )
    with op.batch_alter_table("callback_endpoints", schema=None) as batch_op:
        batch_op.alter_column("client_id", existing_type=Id, nullable=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_callback_endpoints_client_id_clients"), "clients", ["client_id"], ["id"]
        )
        batch_op.create_unique_constraint(
            batch_op.f("uq_callback_endpoints_client_id_url_hash"), ["client_id", "url_hash"]
        )


def downgrade() -> None:
    conn = op.get_bind()
    # One row per URL again (the most recently disabled one wins).
    conn.execute(
        sa.text(
            "DELETE FROM callback_endpoints WHERE EXISTS (SELECT 1 FROM callback_endpoints n "
            "WHERE n.url_hash = callback_endpoints.url_hash AND n.id > callback_endpoints.id)"
        )
    )
    with op.batch_alter_table("callback_endpoints", schema=None) as batch_op:
        batch_op.drop_constraint("uq_callback_endpoints_client_id_url_hash", type_="unique")
        batch_op.drop_constraint("fk_callback_endpoints_client_id_clients", type_="foreignkey")
        batch_op.drop_column("client_id")
        batch_op.create_unique_constraint(batch_op.f("uq_callback_endpoints_url_hash"), ["url_hash"])

    # Fails if two clients now share a correlation id: that cannot be undone without losing a task.
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.drop_constraint("uq_external_tasks_reference", type_="unique")
        batch_op.drop_constraint("uq_external_tasks_correlation_id_client_id", type_="unique")
        batch_op.create_unique_constraint(batch_op.f("uq_external_tasks_correlation_id"), ["correlation_id"])
        batch_op.drop_column("reference")
