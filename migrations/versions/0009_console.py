"""console: operator events, the indexes the operator console reads by, planner statistics

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 06:30:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FINISHED_EVENTS = "kind IN ('state.succeeded', 'state.failed')"
OPEN_ORPHAN = "state = 'open'"
#: The console estimates finished tasks by state and provider from the planner (a count would read
#: every finished task): statistics on the two columns together make that estimate a good one.
STATISTICS = "st_external_tasks_state_provider"


def upgrade() -> None:
    op.create_table(
        "operator_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=32), nullable=False),
        sa.Column("subject_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "detail", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_events")),
    )
    with op.batch_alter_table("operator_events", schema=None) as batch_op:
        batch_op.create_index("ix_operator_events_subject", ["subject", "subject_id", "id"], unique=False)
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_task_events_finished",
            ["at"],
            unique=False,
            postgresql_where=sa.text(FINISHED_EVENTS),
            sqlite_where=sa.text(FINISHED_EVENTS),
        )
    with op.batch_alter_table("orphan_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_orphan_events_open",
            ["id"],
            unique=False,
            postgresql_where=sa.text(OPEN_ORPHAN),
            sqlite_where=sa.text(OPEN_ORPHAN),
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (mcv, ndistinct) ON state, provider FROM external_tasks"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")
    with op.batch_alter_table("orphan_events", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_orphan_events_open", postgresql_where=sa.text(OPEN_ORPHAN), sqlite_where=sa.text(OPEN_ORPHAN)
        )
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_task_events_finished", postgresql_where=sa.text(FINISHED_EVENTS), sqlite_where=sa.text(FINISHED_EVENTS)
        )
    op.drop_table("operator_events")
