"""count records per dataset

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 01:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_record_counts",
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("dataset_pk", "shard", name=op.f("pk_dataset_record_counts")),
    )
    # what is stored already, counted once, in shard 0
    op.execute(
        "INSERT INTO dataset_record_counts (dataset_pk, shard, records) "
        "SELECT dataset_pk, 0, count(*) FROM records GROUP BY dataset_pk"
    )


def downgrade() -> None:
    op.drop_table("dataset_record_counts")
