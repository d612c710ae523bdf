"""routing generation: a counter of remote and bucket-mapping changes (issue 26)

Revision ID: 0009r
Revises: 0009p
Create Date: 2026-12-02 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009r'
down_revision = '0009p'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        'routing_generation',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('generation', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_routing_generation')),
    )
    op.bulk_insert(table, [{'id': 1, 'generation': 0}])


def downgrade() -> None:
    op.drop_table('routing_generation')
