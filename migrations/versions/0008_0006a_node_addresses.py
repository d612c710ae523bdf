"""nodes: the internal endpoint's address (host:port) of each node, for peer reads

Revision ID: 0006a
Revises: 0005d
Create Date: 2026-12-01 10:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006a'
down_revision = '0005d'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('address', sa.String(length=255), nullable=False, server_default=''))


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('address')
