"""transactions.records_processed: a file's progress while it is processing

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 20:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("records_processed", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("records_processed")
