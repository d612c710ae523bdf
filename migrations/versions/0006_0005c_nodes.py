"""nodes: one row per live node id (registration and heartbeat)

Revision ID: 0005c
Revises: 0005a
Create Date: 2026-12-01 04:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005c'
down_revision = '0005a'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'nodes',
        sa.Column('node_id', sa.String(length=64), nullable=False),
        sa.Column('instance', sa.String(length=64), nullable=False),
        sa.Column('data_dir_id', sa.String(length=64), nullable=False, server_default=''),
        sa.Column('host', sa.String(length=255), nullable=False, server_default=''),
        sa.Column('pid', sa.Integer(), nullable=False, server_default='0'),
        sa.Column('version', sa.String(length=64), nullable=False, server_default=''),
        sa.Column('started_at', sa.Float(), nullable=False, server_default='0'),
        sa.Column('heartbeat_at', sa.Float(), nullable=False, server_default='0'),
        sa.PrimaryKeyConstraint('node_id', name=op.f('pk_nodes')),
    )


def downgrade() -> None:
    op.drop_table('nodes')
