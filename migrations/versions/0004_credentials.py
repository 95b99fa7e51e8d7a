"""credentials: api_keys (rotation, retirement, revocation), disabled clients, callback origins

Existing ``clients.api_key_hash`` values become one active key each (no display prefix: only the
hash was ever stored); the column is then dropped.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", ID, nullable=False),
        sa.Column("client_id", ID, nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["client_id"], ["clients.id"], name=op.f("fk_api_keys_client_id_clients")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_client_id"), ["client_id"], unique=False)

    op.execute(
        "INSERT INTO api_keys (client_id, key_hash, created_at) SELECT id, api_key_hash, created_at FROM clients"
    )

    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.add_column(sa.Column("callback_origins", JSON, server_default=sa.text("'[]'"), nullable=False))
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.drop_constraint(batch_op.f("uq_clients_api_key_hash"), type_="unique")
        batch_op.drop_column("api_key_hash")


def downgrade() -> None:
    # Back to one key per client: its newest live key (a client with none gets a hash no key has).
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.add_column(sa.Column("api_key_hash", sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE clients SET api_key_hash = COALESCE("
        "(SELECT k.key_hash FROM api_keys k WHERE k.client_id = clients.id AND k.retired_at IS NULL "
        "AND k.revoked_at IS NULL ORDER BY k.created_at DESC, k.id DESC LIMIT 1), "
        "'no-live-key-' || CAST(clients.id AS VARCHAR(20)))"
    )
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.alter_column("api_key_hash", existing_type=sa.String(length=64), nullable=False)
        batch_op.create_unique_constraint(batch_op.f("uq_clients_api_key_hash"), ["api_key_hash"])
        batch_op.drop_column("disabled_at")
        batch_op.drop_column("callback_origins")

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_client_id"))
    op.drop_table("api_keys")
