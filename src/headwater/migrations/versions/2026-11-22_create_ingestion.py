"""create ingestion

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 06:54:37.137547
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import headwater.db

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("company_id", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_idempotency_keys_created_at"), ["created_at"], unique=False
        )

    op.create_table(
        "datasets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("dataset_id", sa.String(length=64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column(
            "options", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["client_id"],
            ["ingestion_clients.client_id"],
            name=op.f("fk_datasets_client_id_ingestion_clients"),
        ),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_datasets_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("client_id", "dataset_id", name=op.f("uq_datasets_client_id")),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_datasets_company_id"), ["company_id"], unique=False)

    op.create_table(
        "dataset_schemas",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "schema", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_pk"], ["datasets.id"], name=op.f("fk_dataset_schemas_dataset_pk_datasets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_schemas")),
        sa.UniqueConstraint("dataset_pk", "version", name=op.f("uq_dataset_schemas_dataset_pk")),
    )
    op.create_table(
        "transactions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("dataset_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=True),
        sa.Column("records_received", sa.Integer(), nullable=False),
        sa.Column("records_accepted", sa.Integer(), nullable=False),
        sa.Column("records_rejected", sa.Integer(), nullable=False),
        sa.Column("error_count", sa.Integer(), nullable=False),
        sa.Column(
            "errors", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("file_name", sa.String(length=255), nullable=True),
        sa.Column("file_size", sa.BigInteger(), nullable=True),
        sa.Column("content_type", sa.String(length=64), nullable=True),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("completed_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_transactions_company_id_companies")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_pk"], ["datasets.id"], name=op.f("fk_transactions_dataset_pk_datasets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transactions")),
    )
    with op.batch_alter_table("transactions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_transactions_company_id"), ["company_id", "created_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_transactions_dataset_pk"), ["dataset_pk", "created_at"], unique=False
        )

    op.create_table(
        "records",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("record_id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("dataset_pk", sa.Uuid(), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("ingested_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_records")),
    )
    with op.batch_alter_table("records", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_records_dataset_pk"), ["dataset_pk", "ingested_at", "seq"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_records_transaction_id"), ["transaction_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_records_transaction_id"))
        batch_op.drop_index(batch_op.f("ix_records_dataset_pk"))

    op.drop_table("records")
    with op.batch_alter_table("transactions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_transactions_dataset_pk"))
        batch_op.drop_index(batch_op.f("ix_transactions_company_id"))

    op.drop_table("transactions")
    op.drop_table("dataset_schemas")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_datasets_company_id"))

    op.drop_table("datasets")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_keys_created_at"))

    op.drop_table("idempotency_keys")
