"""inboxes and inbox_messages: the email channel (contract section 12)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inboxes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("local_part", sa.String(64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("client_id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("allowed_senders", sa.JSON(), nullable=False),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_inboxes_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inboxes")),
        sa.UniqueConstraint("local_part", name=op.f("uq_inboxes_local_part")),
    )
    op.create_index("ix_inboxes_company_id", "inboxes", ["company_id"])
    op.create_table(
        "inbox_messages",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("inbox_id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("message_id", sa.String(998), nullable=False),
        sa.Column("sender", sa.String(320), nullable=False),
        sa.Column("subject", sa.String(998), nullable=False),
        sa.Column("transaction_ids", sa.JSON(), nullable=False),
        sa.Column("ignored", sa.JSON(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reply_state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("replied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox_messages")),
    )
    op.create_index("ix_inbox_messages_inbox_id", "inbox_messages", ["inbox_id", "message_id"])
    op.create_index(
        "ix_inbox_messages_reply_state", "inbox_messages", ["reply_state", "next_attempt_at"]
    )
    op.create_index("ix_inbox_messages_sender", "inbox_messages", ["sender", "replied_at"])


def downgrade() -> None:
    op.drop_table("inbox_messages")
    op.drop_table("inboxes")
