"""inbox_message_ids: one row per (inbox, Message-ID) that the database keeps unique, so
two copies of one message arriving at once are stored once (contract section 12)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbox_message_ids",
        sa.Column("inbox_id", sa.Uuid(), nullable=False),
        sa.Column("message_key", sa.String(64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("inbox_id", "message_key", name=op.f("pk_inbox_message_ids")),
    )


def downgrade() -> None:
    op.drop_table("inbox_message_ids")
