"""create files

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 07:50:29.840688
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quarantined_rows",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("record", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("resolved_by", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_quarantined_rows")),
    )
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_quarantined_rows_transaction_id"),
            ["transaction_id", "seq"],
            unique=False,
        )

    op.create_table(
        "file_uploads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("bucket", sa.String(length=255), nullable=False),
        sa.Column("object_key", sa.String(length=255), nullable=False),
        sa.Column("content_type", sa.String(length=64), nullable=False),
        sa.Column("max_bytes", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("etag", sa.String(length=128), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("expires_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("uploaded_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["transactions.id"],
            name=op.f("fk_file_uploads_transaction_id_transactions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_file_uploads")),
        sa.UniqueConstraint("transaction_id", name=op.f("uq_file_uploads_transaction_id")),
    )
    with op.batch_alter_table("file_uploads", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_file_uploads_state"), ["state", "expires_at"], unique=False
        )

    op.create_table(
        "file_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("file_id", sa.Uuid(), nullable=False),
        sa.Column("bucket", sa.String(length=255), nullable=False),
        sa.Column("object_key", sa.String(length=255), nullable=False),
        sa.Column("etag", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=64), nullable=True),
        sa.Column("claimed_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["file_id"], ["file_uploads.id"], name=op.f("fk_file_jobs_file_id_file_uploads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_file_jobs")),
        sa.UniqueConstraint("bucket", "object_key", "etag", name=op.f("uq_file_jobs_bucket")),
    )
    with op.batch_alter_table("file_jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_file_jobs_file_id"), ["file_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_file_jobs_bucket"), ["bucket", "state", "created_at"], unique=False
        )

    with op.batch_alter_table("transactions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("uploaded_at", headwater.db.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("started_at", headwater.db.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("transactions", schema=None) as batch_op:
        batch_op.drop_column("started_at")
        batch_op.drop_column("uploaded_at")

    with op.batch_alter_table("file_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_file_jobs_bucket"))
        batch_op.drop_index(batch_op.f("ix_file_jobs_file_id"))

    op.drop_table("file_jobs")
    with op.batch_alter_table("file_uploads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_file_uploads_state"))

    op.drop_table("file_uploads")
    with op.batch_alter_table("quarantined_rows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_quarantined_rows_transaction_id"))

    op.drop_table("quarantined_rows")
