"""transforms: a dataset's versioned steps, the companies' hash keys, dedupe keys, and
the counts and versions transactions and records carry (contract section 16)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_transforms",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("steps", headwater.db.JSONDocument(), nullable=False),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_pk"], ["datasets.id"], name=op.f("fk_dataset_transforms_dataset_pk_datasets")
        ),
        sa.PrimaryKeyConstraint(
            "company_id", "dataset_pk", "version", name=op.f("pk_dataset_transforms")
        ),
    )
    op.create_table(
        "company_hash_keys",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("sealed", sa.String(200), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_company_hash_keys_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("company_id", name=op.f("pk_company_hash_keys")),
    )
    op.create_table(
        "dedupe_keys",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("digest", sa.LargeBinary(16), nullable=False),
        sa.Column("seen_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("staged_by", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("company_id", "dataset_pk", "digest", name=op.f("pk_dedupe_keys")),
    )
    # partial: a push's claims (staged_by NULL) add no entry here
    op.create_index(
        "ix_dedupe_keys_staged",
        "dedupe_keys",
        ["staged_by", "digest"],
        postgresql_where=sa.text("staged_by IS NOT NULL"),
        sqlite_where=sa.text("staged_by IS NOT NULL"),
    )
    op.create_index("ix_dedupe_keys_seen_at", "dedupe_keys", ["seen_at"])
    # server defaults: PostgreSQL adds these without rewriting the tables
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("transform_version", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("transactions") as batch:
        batch.add_column(sa.Column("transform_version", sa.Integer(), nullable=True))
        for name in ("records_filtered", "records_duplicates"):
            batch.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
    op.add_column("records", sa.Column("transform_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("records", "transform_version")
    with op.batch_alter_table("transactions") as batch:
        for name in ("records_duplicates", "records_filtered", "transform_version"):
            batch.drop_column(name)
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("transform_version")
    op.drop_index("ix_dedupe_keys_seen_at", "dedupe_keys")
    op.drop_index("ix_dedupe_keys_staged", "dedupe_keys")
    op.drop_table("dedupe_keys")
    op.drop_table("company_hash_keys")
    op.drop_table("dataset_transforms")
