"""bucket owners: the tenant each bucket belongs to

Revision ID: 0005d
Revises: 0005c
Create Date: 2026-12-01 04:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005d'
down_revision = '0005c'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'bucket_owners',
        sa.Column('bucket', sa.String(length=63), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False, server_default='0'),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_bucket_owners_tenant_id_tenants'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('bucket', name=op.f('pk_bucket_owners')),
    )
    with op.batch_alter_table('bucket_owners', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bucket_owners_tenant_id'), ['tenant_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('bucket_owners', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bucket_owners_tenant_id'))
    op.drop_table('bucket_owners')
