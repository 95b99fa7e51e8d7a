"""callback tokens: the SHA-256 of each per-task token the token-url scheme gives a vendor in its
callback URL (issue 40)

Revision ID: 0020
Revises: 0017
Create Date: 2026-12-06 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "callback_tokens",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["external_tasks.id"], name=op.f("fk_callback_tokens_task_id_external_tasks")
        ),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_callback_tokens")),
    )
    op.create_index("ix_callback_tokens_task_id", "callback_tokens", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_callback_tokens_task_id", table_name="callback_tokens")
    op.drop_table("callback_tokens")
