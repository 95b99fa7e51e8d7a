"""endpoint health: each client's callback origins that failed, paused and probed (issue 20)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "endpoint_health",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("client_id", ID, nullable=False),
        sa.Column("origin_hash", sa.String(length=64), nullable=False),
        sa.Column("origin", sa.String(length=300), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("pauses", sa.Integer(), nullable=False),
        sa.Column("paused_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("probe_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["client_id"], ["clients.id"], name=op.f("fk_endpoint_health_client_id_clients")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoint_health")),
        sa.UniqueConstraint("client_id", "origin_hash", name=op.f("uq_endpoint_health_client_id_origin_hash")),
    )


def downgrade() -> None:
    op.drop_table("endpoint_health")
