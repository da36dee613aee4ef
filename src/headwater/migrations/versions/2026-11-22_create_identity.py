"""create identity

Revision ID: 0001
Revises:
Create Date: 2026-11-22 05:12:22.387363
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import headwater.db

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "companies",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_companies")),
    )
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("algorithm", sa.String(length=10), nullable=False),
        sa.Column("private_key_pem", sa.Text(), nullable=False),
        sa.Column(
            "public_jwk",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )
    with op.batch_alter_table("signing_keys", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_signing_keys_created_at"), ["created_at"], unique=False
        )

    op.create_table(
        "credentials",
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("secret_hash", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=True),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column(
            "scopes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "client_ids",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_credentials_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("client_id", name=op.f("pk_credentials")),
        sa.UniqueConstraint("author_id", name=op.f("uq_credentials_author_id")),
    )
    with op.batch_alter_table("credentials", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_credentials_company_id"), ["company_id", "created_at"], unique=False
        )

    op.create_table(
        "ingestion_clients",
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_ingestion_clients_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("client_id", name=op.f("pk_ingestion_clients")),
    )
    with op.batch_alter_table("ingestion_clients", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_ingestion_clients_company_id"),
            ["company_id", "created_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("ingestion_clients", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ingestion_clients_company_id"))

    op.drop_table("ingestion_clients")
    with op.batch_alter_table("credentials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_credentials_company_id"))

    op.drop_table("credentials")
    with op.batch_alter_table("signing_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_signing_keys_created_at"))

    op.drop_table("signing_keys")
    op.drop_table("companies")
