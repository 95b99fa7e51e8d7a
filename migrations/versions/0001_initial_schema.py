"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 10:01:57.649280
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('callback_endpoints',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('url_hash', sa.String(length=64), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('disabled_reason', sa.Text(), nullable=True),
    sa.Column('enabled_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_callback_endpoints')),
    sa.UniqueConstraint('url_hash', name=op.f('uq_callback_endpoints_url_hash'))
    )
    op.create_table('clients',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('api_key_hash', sa.String(length=64), nullable=False),
    sa.Column('callback_secrets', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('callback_url', sa.String(length=2000), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_clients')),
    sa.UniqueConstraint('api_key_hash', name=op.f('uq_clients_api_key_hash')),
    sa.UniqueConstraint('name', name=op.f('uq_clients_name'))
    )
    op.create_table('dead_letters',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('message_id', sa.String(length=64), nullable=False),
    sa.Column('outbox_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('provider', sa.String(length=100), nullable=True),
    sa.Column('correlation_id', sa.String(length=200), nullable=True),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('fault', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('first_failed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_failed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('replay_count', sa.Integer(), nullable=False),
    sa.Column('closed_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dead_letters'))
    )
    with op.batch_alter_table('dead_letters', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dead_letters_correlation_id'), ['correlation_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_dead_letters_message_id'), ['message_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_dead_letters_state'), ['state'], unique=False)

    op.create_table('incidents',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('correlation_id', sa.String(length=200), nullable=True),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('subject', sa.String(length=2100), nullable=False),
    sa.Column('open_key', sa.String(length=64), nullable=True),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.Column('owner', sa.String(length=100), nullable=True),
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_incidents')),
    sa.UniqueConstraint('open_key', name=op.f('uq_incidents_open_key'))
    )
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_incidents_correlation_id'), ['correlation_id'], unique=False)
        batch_op.create_index('ix_incidents_open', ['resolved_at', 'kind'], unique=False)

    op.create_table('orphan_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('source', sa.String(length=100), nullable=False),
    sa.Column('message_id', sa.String(length=200), nullable=False),
    sa.Column('vendor_job_id', sa.String(length=200), nullable=False),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('resolved_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('flagged_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_orphan_events')),
    sa.UniqueConstraint('source', 'message_id', name=op.f('uq_orphan_events_source_message_id'))
    )
    with op.batch_alter_table('orphan_events', schema=None) as batch_op:
        batch_op.create_index('ix_orphan_events_lookup', ['source', 'vendor_job_id', 'state'], unique=False)
        batch_op.create_index('ix_orphan_events_unflagged', ['received_at'], unique=False, postgresql_where=sa.text("state = 'open' AND flagged_at IS NULL"), sqlite_where=sa.text("state = 'open' AND flagged_at IS NULL"))

    op.create_table('outbox_messages',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('message_id', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('task_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('correlation_id', sa.String(length=200), nullable=True),
    sa.Column('payload', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('deliveries', sa.Integer(), nullable=False),
    sa.Column('parked_reason', sa.String(length=64), nullable=True),
    sa.Column('target', sa.String(length=2000), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('done_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_outbox_messages')),
    sa.UniqueConstraint('message_id', name=op.f('uq_outbox_messages_message_id'))
    )
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.create_index('ix_outbox_messages_pending', ['done_at', 'dispatched_at', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_outbox_messages_task_id'), ['task_id'], unique=False)

    op.create_table('processed_messages',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('source', sa.String(length=100), nullable=False),
    sa.Column('message_id', sa.String(length=200), nullable=False),
    sa.Column('message_type', sa.String(length=64), nullable=False),
    sa.Column('processed_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_processed_messages')),
    sa.UniqueConstraint('source', 'message_id', name=op.f('uq_processed_messages_source_message_id'))
    )
    with op.batch_alter_table('processed_messages', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_processed_messages_processed_at'), ['processed_at'], unique=False)

    op.create_table('external_tasks',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('correlation_id', sa.String(length=200), nullable=False),
    sa.Column('client_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('provider', sa.String(length=100), nullable=False),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('input', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('outcome', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('callback_url', sa.String(length=2000), nullable=True),
    sa.Column('vendor_job_id', sa.String(length=200), nullable=True),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('request_fingerprint', sa.String(length=64), nullable=True),
    sa.Column('acceptance_deadline', sa.DateTime(timezone=True), nullable=True),
    sa.Column('execution_deadline', sa.DateTime(timezone=True), nullable=True),
    sa.Column('on_deadline', sa.String(length=16), nullable=False),
    sa.Column('acceptance_escalated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('execution_escalated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('checked_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['client_id'], ['clients.id'], name=op.f('fk_external_tasks_client_id_clients')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_external_tasks')),
    sa.UniqueConstraint('client_id', 'idempotency_key', name=op.f('uq_external_tasks_client_id_idempotency_key')),
    sa.UniqueConstraint('correlation_id', name=op.f('uq_external_tasks_correlation_id')),
    sa.UniqueConstraint('provider', 'vendor_job_id', name=op.f('uq_external_tasks_provider_vendor_job_id'))
    )
    with op.batch_alter_table('external_tasks', schema=None) as batch_op:
        batch_op.create_index('ix_external_tasks_acceptance_due', ['acceptance_deadline'], unique=False, postgresql_where=sa.text("state IN ('requested', 'submitted') AND acceptance_escalated_at IS NULL"), sqlite_where=sa.text("state IN ('requested', 'submitted') AND acceptance_escalated_at IS NULL"))
        batch_op.create_index('ix_external_tasks_client_id_id', ['client_id', 'id'], unique=False)
        batch_op.create_index('ix_external_tasks_execution_due', ['execution_deadline'], unique=False, postgresql_where=sa.text("state IN ('requested', 'submitted', 'accepted', 'cancel_requested') AND execution_escalated_at IS NULL"), sqlite_where=sa.text("state IN ('requested', 'submitted', 'accepted', 'cancel_requested') AND execution_escalated_at IS NULL"))
        batch_op.create_index('ix_external_tasks_quiet_at_vendor', ['provider', 'checked_at'], unique=False, postgresql_where=sa.text("state IN ('submitted', 'accepted', 'cancel_requested')"), sqlite_where=sa.text("state IN ('submitted', 'accepted', 'cancel_requested')"))
        batch_op.create_index('ix_external_tasks_quiet_requested', ['checked_at'], unique=False, postgresql_where=sa.text("state = 'requested'"), sqlite_where=sa.text("state = 'requested'"))
        batch_op.create_index('ix_external_tasks_retrying', ['next_attempt_at'], unique=False, postgresql_where=sa.text('next_attempt_at IS NOT NULL'), sqlite_where=sa.text('next_attempt_at IS NOT NULL'))
        batch_op.create_index('ix_external_tasks_state_provider', ['state', 'provider'], unique=False)

    op.create_table('task_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('task_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('detail', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['external_tasks.id'], name=op.f('fk_task_events_task_id_external_tasks')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_events'))
    )
    with op.batch_alter_table('task_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_task_events_task_id'), ['task_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('task_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_task_events_task_id'))

    op.drop_table('task_events')
    with op.batch_alter_table('external_tasks', schema=None) as batch_op:
        batch_op.drop_index('ix_external_tasks_state_provider')
        batch_op.drop_index('ix_external_tasks_retrying', postgresql_where=sa.text('next_attempt_at IS NOT NULL'), sqlite_where=sa.text('next_attempt_at IS NOT NULL'))
        batch_op.drop_index('ix_external_tasks_quiet_requested', postgresql_where=sa.text("state = 'requested'"), sqlite_where=sa.text("state = 'requested'"))
        batch_op.drop_index('ix_external_tasks_quiet_at_vendor', postgresql_where=sa.text("state IN ('submitted', 'accepted', 'cancel_requested')"), sqlite_where=sa.text("state IN ('submitted', 'accepted', 'cancel_requested')"))
        batch_op.drop_index('ix_external_tasks_execution_due', postgresql_where=sa.text("state IN ('requested', 'submitted', 'accepted', 'cancel_requested') AND execution_escalated_at IS NULL"), sqlite_where=sa.text("state IN ('requested', 'submitted', 'accepted', 'cancel_requested') AND execution_escalated_at IS NULL"))
        batch_op.drop_index('ix_external_tasks_client_id_id')
        batch_op.drop_index('ix_external_tasks_acceptance_due', postgresql_where=sa.text("state IN ('requested', 'submitted') AND acceptance_escalated_at IS NULL"), sqlite_where=sa.text("state IN ('requested', 'submitted') AND acceptance_escalated_at IS NULL"))

    op.drop_table('external_tasks')
    with op.batch_alter_table('processed_messages', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_processed_messages_processed_at'))

    op.drop_table('processed_messages')
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_outbox_messages_task_id'))
        batch_op.drop_index('ix_outbox_messages_pending')

    op.drop_table('outbox_messages')
    with op.batch_alter_table('orphan_events', schema=None) as batch_op:
        batch_op.drop_index('ix_orphan_events_unflagged', postgresql_where=sa.text("state = 'open' AND flagged_at IS NULL"), sqlite_where=sa.text("state = 'open' AND flagged_at IS NULL"))
        batch_op.drop_index('ix_orphan_events_lookup')

    op.drop_table('orphan_events')
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.drop_index('ix_incidents_open')
        batch_op.drop_index(batch_op.f('ix_incidents_correlation_id'))

    op.drop_table('incidents')
    with op.batch_alter_table('dead_letters', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dead_letters_state'))
        batch_op.drop_index(batch_op.f('ix_dead_letters_message_id'))
        batch_op.drop_index(batch_op.f('ix_dead_letters_correlation_id'))

    op.drop_table('dead_letters')
    op.drop_table('clients')
    op.drop_table('callback_endpoints')

