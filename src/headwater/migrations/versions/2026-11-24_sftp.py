"""sftp_accounts and sftp_uploads: the SFTP channel (contract section 11)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 00:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sftp_accounts",
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("client_ids", sa.JSON(), nullable=False),
        sa.Column("public_keys", sa.JSON(), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_sftp_accounts_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("username", name=op.f("pk_sftp_accounts")),
        sa.UniqueConstraint("id", name=op.f("uq_sftp_accounts_id")),
    )
    op.create_index("ix_sftp_accounts_company_id", "sftp_accounts", ["company_id"])
    op.create_table(
        "sftp_uploads",
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("receipt_removed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("transaction_id", name=op.f("pk_sftp_uploads")),
    )
    op.create_index(
        "ix_sftp_uploads_company_id",
        "sftp_uploads",
        ["company_id", "client_id", "dataset_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_table("sftp_uploads")
    op.drop_table("sftp_accounts")
