"""leased_until on webhook deliveries and inbox messages: the end of the lease an
attempt runs under (`jobs.Due`), so a lease is told from a retry's due time and an
endpoint's attempts in flight are counted across every process (issue 33)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 19:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True))
        # partial: only the deliveries being attempted have an entry
        batch.create_index(
            "ix_webhook_deliveries_leased",
            ["endpoint_id", "leased_until"],
            postgresql_where=sa.text("leased_until IS NOT NULL"),
            sqlite_where=sa.text("leased_until IS NOT NULL"),
        )
    with op.batch_alter_table("inbox_messages") as batch:
        batch.add_column(sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inbox_messages") as batch:
        batch.drop_column("leased_until")
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_index("ix_webhook_deliveries_leased")
        batch.drop_column("leased_until")
