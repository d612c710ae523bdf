"""part replicas: where a part's second copy is held (write_replicas 2, issue 26)

Revision ID: 0009p
Revises: 0008s
Create Date: 2026-12-02 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009p'
down_revision = '0008s'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('multipart_parts') as batch:
        batch.add_column(sa.Column('replica_node', sa.String(length=128), nullable=True))
        batch.add_column(sa.Column('replica_blob', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('multipart_parts') as batch:
        batch.drop_column('replica_blob')
        batch.drop_column('replica_node')
