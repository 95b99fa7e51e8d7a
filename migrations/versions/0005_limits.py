"""limits: shared rate-limit state (database storage), per-client limit overrides, open-task index

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OPEN = "state NOT IN ('succeeded', 'failed', 'canceled')"


def upgrade() -> None:
    op.create_table(
        "rate_limits",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("tat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_rate_limits")),
    )
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.add_column(sa.Column("submit_rate_per_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("submit_burst", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("max_open_tasks", sa.Integer(), nullable=True))
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_external_tasks_client_open",
            ["client_id"],
            unique=False,
            postgresql_where=sa.text(OPEN),
            sqlite_where=sa.text(OPEN),
        )


def downgrade() -> None:
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_external_tasks_client_open", postgresql_where=sa.text(OPEN), sqlite_where=sa.text(OPEN))
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.drop_column("max_open_tasks")
        batch_op.drop_column("submit_burst")
        batch_op.drop_column("submit_rate_per_s")
    op.drop_table("rate_limits")
