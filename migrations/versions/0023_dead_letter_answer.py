"""dead letters keep the refusing side's answer (issue 43 point 7): a bounded, redacted excerpt of
the body a vendor (or a domain app) sent with the status that dead-lettered the message

Revision ID: 0023
Revises: 0021
Create Date: 2026-12-07 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dead_letters", sa.Column("answer", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.drop_column("answer")
