"""write replicas: the policy field and the replica records of buffered writes

Revision ID: 0006b
Revises: 0006a
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006b'
down_revision = '0006a'  # 0005d in the brief; after w3/fleet's 0006a once merged
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('policies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('write_replicas', sa.Integer(), nullable=True))
    op.create_table(
        'journal_replicas',
        sa.Column('seq', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
        sa.Column('node_id', sa.String(length=64), nullable=False),
        sa.Column('blobs_json', sa.Text(), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False, server_default='0'),
        sa.ForeignKeyConstraint(['seq'], ['object_versions.seq'],
                                name=op.f('fk_journal_replicas_seq_object_versions'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('seq', 'node_id', name=op.f('pk_journal_replicas')),
    )
    with op.batch_alter_table('journal_replicas', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_journal_replicas_node_id'), ['node_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('journal_replicas', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_journal_replicas_node_id'))
    op.drop_table('journal_replicas')
    with op.batch_alter_table('policies', schema=None) as batch_op:
        batch_op.drop_column('write_replicas')
