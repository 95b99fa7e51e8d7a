"""console sessions: one row per console sign-in, removed at sign-out, so that sign-out ends the
session on the server and a copied cookie stops working (issue 44)

Cookies issued before this carry no session id: their holders sign in again.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("operator", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index("ix_console_sessions_operator", "console_sessions", ["operator"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("console_sessions")
