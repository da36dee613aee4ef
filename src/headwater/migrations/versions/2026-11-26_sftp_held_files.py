"""sftp_held_files: files held under temporary names live in the database, so that a
restart or another instance still finds them (contract section 11)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sftp_held_files",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("file_id", sa.Uuid(), nullable=False),
        sa.Column("object_key", sa.String(255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("etag", sa.String(255), nullable=False),
        sa.Column("held_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "company_id", "username", "client_id", "dataset_id", "name",
            name=op.f("pk_sftp_held_files"),
        ),
    )  # fmt: skip
    op.create_index("ix_sftp_held_files_held_at", "sftp_held_files", ["held_at"])
    op.create_index("ix_sftp_held_files_file_id", "sftp_held_files", ["file_id"])


def downgrade() -> None:
    op.drop_table("sftp_held_files")
