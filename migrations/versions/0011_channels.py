"""channels: a client's broker channel (AMQP or Redis Streams), copied to its tasks

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 07:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clients") as batch:
        batch.add_column(sa.Column("channel", sa.String(length=16), nullable=True))
    with op.batch_alter_table("external_tasks") as batch:
        batch.add_column(sa.Column("channel", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("external_tasks") as batch:
        batch.drop_column("channel")
    with op.batch_alter_table("clients") as batch:
        batch.drop_column("channel")
