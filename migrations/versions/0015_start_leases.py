"""start leases: when a published or started submit or relay is presumed lost with its worker
(issue 44, point 5; service/start_leases.py)

Nullable: rows written before this, and kinds that keep only the outbox lease, have none; the
sweep then re-drives them by the outbox lease as before.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-08 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox_messages") as batch:
        batch.add_column(sa.Column("start_lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox_messages") as batch:
        batch.drop_column("start_lease_until")
