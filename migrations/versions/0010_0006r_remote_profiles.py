"""remote profiles: the capability profile of each registered remote

Revision ID: 0006r
Revises: 0006b
Create Date: 2026-12-01 10:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006r'
down_revision = '0006b'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('remotes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('profile', sa.String(length=32), nullable=False, server_default='seaweedfs'))


def downgrade() -> None:
    with op.batch_alter_table('remotes', schema=None) as batch_op:
        batch_op.drop_column('profile')
