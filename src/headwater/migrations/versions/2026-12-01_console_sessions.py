"""console_sessions: the web console's sign-in sessions (contract 18)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("credential_id", sa.String(64), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=True),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["credential_id"],
            ["credentials.client_id"],
            name=op.f("fk_console_sessions_credential_id_credentials"),
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_expires_at"), "console_sessions", ["expires_at"])
    op.create_index(
        op.f("ix_console_sessions_credential_id"), "console_sessions", ["credential_id"]
    )


def downgrade() -> None:
    op.drop_table("console_sessions")
