"""remote upload opener: the eager part copier records that it is opening an upload's remote
multipart upload before it creates it, so one local upload opens at most one remote upload

Revision ID: 0008m
Revises: 0007r
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008m'
down_revision = '0007r'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('multipart_uploads', schema=None) as batch_op:
        batch_op.add_column(sa.Column('remote_opener', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('remote_opener_until', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('multipart_uploads', schema=None) as batch_op:
        batch_op.drop_column('remote_opener_until')
        batch_op.drop_column('remote_opener')
