"""fair dispatch: task priority, concurrency key and place in its client's queue; client weight,
default priority and concurrency-key limit (issue 20)

Tasks already in flight when this runs were published to the broker before dispatch existed: they
are marked released (``dispatched_at`` = their creation), so they count against their client's
window and a vendor's capacity and are never released a second time.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 12:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

QUEUED = "state = 'requested' AND dispatched_at IS NULL"
RELEASED_OPEN = "dispatched_at IS NOT NULL AND state IN ('requested', 'submitted', 'accepted', 'cancel_requested')"


def upgrade() -> None:
    with op.batch_alter_table("clients") as batch:
        batch.add_column(sa.Column("weight", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("default_priority", sa.Integer(), server_default="3", nullable=False))
        batch.add_column(sa.Column("concurrency_key_limit", sa.Integer(), server_default="1", nullable=False))
    with op.batch_alter_table("external_tasks") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), server_default="3", nullable=False))
        batch.add_column(sa.Column("concurrency_key", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("dispatch_rank", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("wait_reason", sa.String(length=32), nullable=True))
    op.execute("UPDATE external_tasks SET dispatched_at = created_at, dispatch_rank = created_at")
    with op.batch_alter_table("external_tasks") as batch:
        batch.create_index(
            "ix_external_tasks_queued",
            ["provider", "client_id", "dispatch_rank", "id"],
            unique=False,
            postgresql_where=sa.text(QUEUED),
            sqlite_where=sa.text(QUEUED),
        )
        batch.create_index(
            "ix_external_tasks_released_open",
            ["provider", "client_id", "concurrency_key"],
            unique=False,
            postgresql_where=sa.text(RELEASED_OPEN),
            sqlite_where=sa.text(RELEASED_OPEN),
        )


def downgrade() -> None:
    with op.batch_alter_table("external_tasks") as batch:
        batch.drop_index("ix_external_tasks_released_open")
        batch.drop_index("ix_external_tasks_queued")
        for column in ("wait_reason", "dispatch_rank", "dispatched_at", "concurrency_key", "priority"):
            batch.drop_column(column)
    with op.batch_alter_table("clients") as batch:
        for column in ("concurrency_key_limit", "default_priority", "weight"):
            batch.drop_column(column)
