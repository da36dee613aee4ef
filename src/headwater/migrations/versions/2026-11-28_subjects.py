"""subjects: erasures, suppressions, record tombstones for the feed, each record's
subject digest, and what transactions show of them (contract section 17)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

TIME = headwater.db.UTCDateTime(timezone=True)
RAW_FILE_KEPT = "kind = 'file' AND NOT file_erased"


def upgrade() -> None:
    op.create_table(
        "erasures",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=True),
        sa.Column("dataset_id", sa.String(64), nullable=True),
        sa.Column("client_ids", headwater.db.JSONDocument(), nullable=False),
        sa.Column("subject_count", sa.Integer(), nullable=False),
        sa.Column("suppress", sa.Boolean(), nullable=False),
        sa.Column("digests", headwater.db.JSONDocument(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("quarantined_rows", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("exports", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("claimed_at", TIME, nullable=True),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("completed_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("company_id", "id", name=op.f("pk_erasures")),
    )
    op.create_index("ix_erasures_status", "erasures", ["status", "created_at"])
    op.create_index("ix_erasures_company_id", "erasures", ["company_id", "created_at"])
    op.create_table(
        "erasure_items",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("erasure_id", sa.Uuid(), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("ingested_at", TIME, nullable=True),
        sa.Column("file_done", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint(
            "company_id", "erasure_id", "transaction_id", name=op.f("pk_erasure_items")
        ),
    )
    op.create_table(
        "suppressions",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=True),
        sa.Column("dataset_id", sa.String(64), nullable=True),
        sa.Column("digests", headwater.db.JSONDocument(), nullable=False),
        sa.Column("erasure_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("company_id", "id", name=op.f("pk_suppressions")),
    )
    op.create_index(
        op.f("ix_suppressions_company_id_created_at"), "suppressions", ["company_id", "created_at"]
    )
    op.create_table(
        "record_tombstones",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("pos", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("record_id", sa.Uuid(), nullable=False),
        sa.PrimaryKeyConstraint(
            "company_id", "dataset_pk", "pos", "seq", name=op.f("pk_record_tombstones")
        ),
    )
    op.create_index(
        op.f("ix_record_tombstones_dataset_pk_pos_seq"),
        "record_tombstones",
        ["dataset_pk", "pos", "seq"],
    )
    # server defaults: PostgreSQL adds these without rewriting the tables
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("subjects_version", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(
            sa.Column("records_suppressed", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("file_erased", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_index(
        "ix_transactions_raw_files",
        "transactions",
        ["completed_at"],
        postgresql_where=sa.text(RAW_FILE_KEPT),
        sqlite_where=sa.text(RAW_FILE_KEPT),
    )
    op.add_column("records", sa.Column("subject", sa.LargeBinary(16), nullable=True))
    op.create_index(
        "ix_records_subject",
        "records",
        ["dataset_pk", "subject"],
        postgresql_where=sa.text("subject IS NOT NULL"),
        sqlite_where=sa.text("subject IS NOT NULL"),
    )
    op.create_index(
        op.f("ix_quarantined_rows_dataset_pk_seq"), "quarantined_rows", ["dataset_pk", "seq"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_quarantined_rows_dataset_pk_seq"), "quarantined_rows")
    op.drop_index("ix_records_subject", "records")
    op.drop_column("records", "subject")
    op.drop_index("ix_transactions_raw_files", "transactions")
    with op.batch_alter_table("transactions") as batch:
        batch.drop_column("file_erased")
        batch.drop_column("records_suppressed")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("subjects_version")
    op.drop_index(op.f("ix_record_tombstones_dataset_pk_pos_seq"), "record_tombstones")
    op.drop_table("record_tombstones")
    op.drop_index(op.f("ix_suppressions_company_id_created_at"), "suppressions")
    op.drop_table("suppressions")
    op.drop_table("erasure_items")
    op.drop_index("ix_erasures_company_id", "erasures")
    op.drop_index("ix_erasures_status", "erasures")
    op.drop_table("erasures")
