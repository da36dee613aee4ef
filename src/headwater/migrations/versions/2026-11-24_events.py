"""events: the outbox every final transaction status writes to; idempotency keys keep
their push's transaction, not its HTTP answer (the answer is made again from it)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("transaction_id", sa.Uuid(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_events")),
    )
    op.create_index("ix_events_company_id", "events", ["company_id", "seq"])
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.drop_column("status_code")
        batch.drop_column("response")


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.add_column(
            sa.Column("status_code", sa.Integer(), nullable=False, server_default="200")
        )
        batch.add_column(sa.Column("response", sa.LargeBinary(), nullable=False, server_default=""))
    op.drop_table("events")
