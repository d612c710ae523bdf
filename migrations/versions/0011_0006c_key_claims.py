"""key claims: one conditional write per key at a time, across processes

Revision ID: 0006c
Revises: 0006r
Create Date: 2026-12-01 10:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006c'
down_revision = '0006r'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'key_claims',
        sa.Column('bucket', sa.String(length=63), nullable=False),
        sa.Column('key', sa.Text().with_variant(sa.Text(collation='C'), 'postgresql'), nullable=False),
        sa.Column('token', sa.String(length=64), nullable=False, server_default=''),
        sa.Column('lease_until', sa.Float(), nullable=False, server_default='0'),
        sa.Column('node_id', sa.String(length=64), nullable=True),
        sa.Column('invocation', sa.String(length=128), nullable=True),
        sa.Column('etag', sa.String(length=128), nullable=True),
        sa.Column('done_at', sa.Float(), nullable=False, server_default='0'),
        sa.PrimaryKeyConstraint('bucket', 'key', name=op.f('pk_key_claims')),
    )


def downgrade() -> None:
    op.drop_table('key_claims')
