"""admin token tenants: a read/write admin token may be bound to one tenant's buckets

Revision ID: 0007r
Revises: 0007s
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007r'
down_revision = '0007s'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('admin_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tenant_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_admin_tokens_tenant_id_tenants'), 'tenants', ['tenant_id'],
                                    ['id'], ondelete='CASCADE')


def downgrade() -> None:
    with op.batch_alter_table('admin_tokens', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_admin_tokens_tenant_id_tenants'), type_='foreignkey')
        batch_op.drop_column('tenant_id')
