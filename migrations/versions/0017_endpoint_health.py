"""endpoint health: the delivery whose failure paused an endpoint (issue 41, 44)

``paused_by`` names the outbox row whose failure began the current pause: once the pause runs out
the other waiting deliveries have the first go at the probe (core.endpoint_health). Nullable, no
foreign key: rows paused before this have none, and an outbox row may be gone before its endpoint
heals.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoint_health") as batch:
        batch.add_column(sa.Column("paused_by", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("endpoint_health") as batch:
        batch.drop_column("paused_by")
