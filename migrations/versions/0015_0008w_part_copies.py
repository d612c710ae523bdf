"""part copies: parts being sent to a remote multipart upload, shared by every worker process

Revision ID: 0008w
Revises: 0008m
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008w'
down_revision = '0008m'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'part_copies',
        sa.Column('remote_upload_id', sa.String(length=1024), nullable=False),
        sa.Column('part_number', sa.Integer(), nullable=False),
        sa.Column('token', sa.String(length=64), nullable=False),
        sa.Column('lease_until', sa.Float(), nullable=False),
        sa.Column('node_id', sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint('remote_upload_id', 'part_number', name=op.f('pk_part_copies')),
    )


def downgrade() -> None:
    op.drop_table('part_copies')
