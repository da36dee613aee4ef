"""endpoint rescheduling: a disabled webhook endpoint's pending deliveries leave the
schedule after the change, in the worker's short transactions (contract section 13)

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a server default: PostgreSQL adds the column without rewriting the table
    op.add_column(
        "webhook_endpoints",
        sa.Column("rescheduling", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("rescheduling")
