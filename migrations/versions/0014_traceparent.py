"""traceparent: the W3C trace context a task was submitted in, continued by every span Liaison
makes for it (issue 22)

Nullable: tasks submitted before this, or without a traceparent while tracing is off, have none.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 21:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("external_tasks") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(length=55), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("external_tasks") as batch:
        batch.drop_column("traceparent")
