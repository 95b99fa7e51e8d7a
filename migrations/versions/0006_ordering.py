"""ordering: per-task callback sequence, waiting relays, superseded completions, coalesced progress

Existing relays are numbered in the order they were written (their id), per task, and each task's
counter starts after its last one, so callbacks sent after the upgrade carry on from there.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 06:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("relay_seq", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("completion_message_id", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("progress_outbox_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True)
        )
    with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sequence", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("holds_back", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.execute(
        "UPDATE outbox_messages SET sequence = (SELECT count(*) FROM outbox_messages AS earlier"
        " WHERE earlier.task_id = outbox_messages.task_id AND earlier.kind = 'relay'"
        " AND earlier.id <= outbox_messages.id)"
        " WHERE kind = 'relay' AND task_id IS NOT NULL"
    )
    op.execute(
        "UPDATE external_tasks SET relay_seq = (SELECT coalesce(max(sequence), 0) FROM outbox_messages"
        " WHERE outbox_messages.task_id = external_tasks.id)"
        " WHERE EXISTS (SELECT 1 FROM outbox_messages WHERE outbox_messages.task_id = external_tasks.id"
        " AND outbox_messages.kind = 'relay')"
    )
    with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
        batch_op.create_unique_constraint(op.f("uq_outbox_messages_task_id_sequence"), ["task_id", "sequence"])


def downgrade() -> None:
    with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("uq_outbox_messages_task_id_sequence"), type_="unique")
        batch_op.drop_column("holds_back")
        batch_op.drop_column("sequence")
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.drop_column("progress_outbox_id")
        batch_op.drop_column("completion_message_id")
        batch_op.drop_column("relay_seq")
