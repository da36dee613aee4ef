"""record_staging: a file's records are stored in short transactions while it is
processed, and hidden until its transaction completes (contract section 10)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "record_staging",
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("transaction_id", name=op.f("pk_record_staging")),
    )
    op.create_index("ix_record_staging_dataset_pk", "record_staging", ["dataset_pk"])


def downgrade() -> None:
    op.drop_table("record_staging")
