"""status checks and polling (issue 40 parts 3 and 4): at most one pending ``check`` outbox row per
task (a ``confirm`` hint's or a poll's), and each task's next poll time and poll count

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

PENDING_CHECK = "kind = 'check' AND done_at IS NULL"
POLL_ARMED = "state IN ('submitted', 'accepted', 'cancel_requested') AND poll_due_at IS NOT NULL"


def upgrade() -> None:
    op.add_column("external_tasks", sa.Column("poll_due_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("external_tasks", sa.Column("polls", sa.Integer(), server_default="0", nullable=False))
    op.create_index(
        "ix_external_tasks_poll_due",
        "external_tasks",
        ["provider", "poll_due_at"],
        postgresql_where=sa.text(POLL_ARMED),
        sqlite_where=sa.text(POLL_ARMED),
    )
    op.create_index(
        "ux_outbox_messages_pending_check",
        "outbox_messages",
        ["task_id"],
        unique=True,
        postgresql_where=sa.text(PENDING_CHECK),
        sqlite_where=sa.text(PENDING_CHECK),
    )


def downgrade() -> None:
    op.drop_index("ux_outbox_messages_pending_check", table_name="outbox_messages")
    op.drop_index("ix_external_tasks_poll_due", table_name="external_tasks")
    with op.batch_alter_table("external_tasks") as batch:
        batch.drop_column("polls")
        batch.drop_column("poll_due_at")
