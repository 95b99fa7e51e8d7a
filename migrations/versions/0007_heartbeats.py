"""heartbeats: a task's heartbeat timeout, its last vendor event, and when silence comes due

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 06:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

HEARTBEAT_ARMED = "state IN ('submitted', 'accepted', 'cancel_requested') AND heartbeat_due_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_timeout_s", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_due_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(
            "ix_external_tasks_heartbeat_due",
            ["heartbeat_due_at"],
            unique=False,
            postgresql_where=sa.text(HEARTBEAT_ARMED),
            sqlite_where=sa.text(HEARTBEAT_ARMED),
        )


def downgrade() -> None:
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_external_tasks_heartbeat_due",
            postgresql_where=sa.text(HEARTBEAT_ARMED),
            sqlite_where=sa.text(HEARTBEAT_ARMED),
        )
        batch_op.drop_column("heartbeat_due_at")
        batch_op.drop_column("last_event_at")
        batch_op.drop_column("heartbeat_timeout_s")
