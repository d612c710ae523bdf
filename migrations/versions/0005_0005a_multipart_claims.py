"""multipart claims: node ids of uploads and parts, the Complete claim and its kept result

Revision ID: 0005a
Revises: 0004
Create Date: 2026-12-01 04:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005a'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('multipart_uploads', schema=None) as batch_op:
        batch_op.add_column(sa.Column('node_id', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('claim', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('claim_until', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('claim_node', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('result_json', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_multipart_uploads_state_initiated', ['state', 'initiated_at'])

    with op.batch_alter_table('multipart_parts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('node_id', sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('multipart_parts', schema=None) as batch_op:
        batch_op.drop_column('node_id')

    with op.batch_alter_table('multipart_uploads', schema=None) as batch_op:
        batch_op.drop_index('ix_multipart_uploads_state_initiated')
        batch_op.drop_column('completed_at')
        batch_op.drop_column('result_json')
        batch_op.drop_column('claim_node')
        batch_op.drop_column('claim_until')
        batch_op.drop_column('claim')
        batch_op.drop_column('node_id')
