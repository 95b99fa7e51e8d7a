"""retention and beat liveness: indexes retention's queries run on, and beat's heartbeat row

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 06:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

FINISHED = "state IN ('succeeded', 'failed', 'canceled')"
OPEN_LETTER = "state = 'open'"


def upgrade() -> None:
    op.create_table(
        "beat_heartbeats",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("ticked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("interval_s", sa.Float(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_beat_heartbeats")),
    )
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_external_tasks_finished",
            ["updated_at"],
            unique=False,
            postgresql_where=sa.text(FINISHED),
            sqlite_where=sa.text(FINISHED),
        )
    with op.batch_alter_table("dead_letters", schema=None) as batch_op:
        batch_op.create_index("ix_dead_letters_closed_at", ["closed_at"], unique=False)
        batch_op.create_index(
            "ix_dead_letters_open_outbox",
            ["outbox_id"],
            unique=False,
            postgresql_where=sa.text(OPEN_LETTER),
            sqlite_where=sa.text(OPEN_LETTER),
        )
    with op.batch_alter_table("orphan_events", schema=None) as batch_op:
        batch_op.create_index("ix_orphan_events_resolved_at", ["resolved_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("orphan_events", schema=None) as batch_op:
        batch_op.drop_index("ix_orphan_events_resolved_at")
    with op.batch_alter_table("dead_letters", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_dead_letters_open_outbox", postgresql_where=sa.text(OPEN_LETTER), sqlite_where=sa.text(OPEN_LETTER)
        )
        batch_op.drop_index("ix_dead_letters_closed_at")
    with op.batch_alter_table("external_tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_external_tasks_finished", postgresql_where=sa.text(FINISHED), sqlite_where=sa.text(FINISHED)
        )
    op.drop_table("beat_heartbeats")
