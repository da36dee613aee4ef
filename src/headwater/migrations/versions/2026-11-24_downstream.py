"""the record feed (each dataset's stored transactions numbered after commit) and exports
(contract section 14)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UNFED = "feed_pos IS NULL AND status = 'completed' AND records_accepted > 0"


def upgrade() -> None:
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("feed_pos", sa.BigInteger(), nullable=True))
        batch.create_index(
            "ix_transactions_feed",
            ["dataset_pk", "feed_pos"],
            postgresql_where=sa.text("feed_pos IS NOT NULL"),
            sqlite_where=sa.text("feed_pos IS NOT NULL"),
        )
        # transactions stored before this revision are numbered by their dataset's first
        # read of the feed
        batch.create_index(
            "ix_transactions_unfed",
            ["dataset_pk", "completed_at"],
            postgresql_where=sa.text(UNFED),
            sqlite_where=sa.text(UNFED),
        )
    with op.batch_alter_table("records") as batch:
        # the feed walks one transaction's records in storage order
        batch.drop_index("ix_records_transaction_id")
        batch.create_index("ix_records_transaction_id", ["transaction_id", "seq"])
    op.create_table(
        "record_feed_heads",
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("pos", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("dataset_pk", name=op.f("pk_record_feed_heads")),
    )
    op.create_table(
        "exports",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("ingested_after", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ingested_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("record_count", sa.BigInteger(), nullable=True),
        sa.Column("file_size", sa.BigInteger(), nullable=True),
        sa.Column("bucket", sa.String(255), nullable=False),
        sa.Column("object_key", sa.String(255), nullable=False),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("available_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_pk"], ["datasets.id"], name=op.f("fk_exports_dataset_pk_datasets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exports")),
    )
    op.create_index("ix_exports_status", "exports", ["status", "created_at"])
    op.create_index("ix_exports_company_id", "exports", ["company_id", "created_at"])
    op.create_index("ix_exports_available_until", "exports", ["available_until"])


def downgrade() -> None:
    op.drop_table("exports")
    op.drop_table("record_feed_heads")
    with op.batch_alter_table("records") as batch:
        batch.drop_index("ix_records_transaction_id")
        batch.create_index("ix_records_transaction_id", ["transaction_id"])
    with op.batch_alter_table("transactions") as batch:
        batch.drop_index("ix_transactions_unfed")
        batch.drop_index("ix_transactions_feed")
        batch.drop_column("feed_pos")
