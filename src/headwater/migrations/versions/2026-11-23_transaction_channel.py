"""transactions.channel: the door each transaction came through (contract section 10)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 20:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("channel", sa.String(16), nullable=True))
    # until now pushes came through the API and files through upload URLs only
    op.execute(
        "UPDATE transactions SET channel = CASE kind WHEN 'json' THEN 'api' ELSE 'upload' END"
    )
    with op.batch_alter_table("transactions") as batch:
        batch.alter_column("channel", existing_type=sa.String(16), nullable=False)
        batch.create_index("ix_transactions_company_channel", ["company_id", "channel"])


def downgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.drop_index("ix_transactions_company_channel")
        batch.drop_column("channel")
