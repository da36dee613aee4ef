"""the event log (positions given after commit, per company), event horizons, webhook endpoints,
deliveries and attempts (contract section 13)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("pos", sa.BigInteger(), nullable=True))
        batch.drop_index("ix_events_company_id")
        # partial: an event inserted (pos NULL) adds no entry here, only its sequencing
        # does; a push's write touches as many indexes as before
        batch.create_index(
            "ix_events_company_id",
            ["company_id", "pos"],
            postgresql_where=sa.text("pos IS NOT NULL"),
            sqlite_where=sa.text("pos IS NOT NULL"),
        )
        batch.create_index(
            "ix_events_unsequenced",
            ["company_id", "seq"],
            postgresql_where=sa.text("pos IS NULL"),
            sqlite_where=sa.text("pos IS NULL"),
        )
    # events written before this revision are given positions by their first sequencing
    op.create_table(
        "event_heads",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("pos", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("company_id", name=op.f("pk_event_heads")),
    )
    op.create_table(
        "event_horizons",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("deleted_through", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("company_id", name=op.f("pk_event_horizons")),
    )
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("event_types", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(500), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
    )
    op.create_index(
        "ix_webhook_endpoints_company_id", "webhook_endpoints", ["company_id", "created_at"]
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", BIGINT, autoincrement=True, nullable=False),
        sa.Column("endpoint_id", sa.Uuid(), nullable=False),
        sa.Column("event_seq", BIGINT, nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("event_created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name=op.f("fk_webhook_deliveries_endpoint_id_webhook_endpoints"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["event_seq"],
            ["events.seq"],
            name=op.f("fk_webhook_deliveries_event_seq_events"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint(
            "endpoint_id", "event_seq", name=op.f("uq_webhook_deliveries_endpoint_id")
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_status", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.create_index(
        "ix_webhook_deliveries_endpoint_id", "webhook_deliveries", ["endpoint_id", "created_at"]
    )
    op.create_index("ix_webhook_deliveries_event_seq", "webhook_deliveries", ["event_seq"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", BIGINT, autoincrement=True, nullable=False),
        sa.Column("delivery_id", BIGINT, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name=op.f("fk_webhook_attempts_delivery_id_webhook_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_attempts")),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
    op.drop_table("event_horizons")
    op.drop_table("event_heads")
    with op.batch_alter_table("events") as batch:
        batch.drop_index("ix_events_unsequenced")
        batch.drop_index("ix_events_company_id")
        batch.create_index("ix_events_company_id", ["company_id", "seq"])
        batch.drop_column("pos")
