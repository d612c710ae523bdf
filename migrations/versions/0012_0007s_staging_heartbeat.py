"""staging heartbeat: a job's runner (a serving process or a Celery worker) proves it is alive

Revision ID: 0007s
Revises: 0006c
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007s'
down_revision = '0006c'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('staging_jobs') as batch:
        batch.add_column(sa.Column('heartbeat_at', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('staging_jobs') as batch:
        batch.drop_column('heartbeat_at')
