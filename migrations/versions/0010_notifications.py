"""notifications: notices to people about incidents, and the kinds operators muted

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 06:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=2100), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("correlation_id", sa.String(length=200), nullable=True),
        sa.Column("incident_id", ID, nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("message_key", sa.String(length=64), nullable=True),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("key", name=op.f("uq_notifications_key")),
    )
    op.create_index("ix_notifications_state", "notifications", ["state", "id"])
    op.create_index("ix_notifications_dispatched", "notifications", ["dispatched_at"])
    op.create_table(
        "notification_mutes",
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("muted_by", sa.String(length=100), nullable=False),
        sa.Column("muted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("kind", name=op.f("pk_notification_mutes")),
    )


def downgrade() -> None:
    op.drop_table("notification_mutes")
    op.drop_index("ix_notifications_dispatched", table_name="notifications")
    op.drop_index("ix_notifications_state", table_name="notifications")
    op.drop_table("notifications")
