"""inline bodies: a small write-back body kept in its journal row (one fsync per small PUT)

Revision ID: 0008s
Revises: 0008w
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008s'
down_revision = '0008w'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('object_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inline_body', sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('object_versions', schema=None) as batch_op:
        batch_op.drop_column('inline_body')
