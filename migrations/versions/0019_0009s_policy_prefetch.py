"""policy prefetch: what a read fetches ahead (issue 28)

Revision ID: 0009s
Revises: 0009r
Create Date: 2026-12-04 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009s'
down_revision = '0009r'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('policies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('prefetch', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('policies', schema=None) as batch_op:
        batch_op.drop_column('prefetch')
