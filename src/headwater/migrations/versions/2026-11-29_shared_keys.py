"""shared_keys: keys every node holds the same, made once (contract 19)

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shared_keys",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_shared_keys")),
    )


def downgrade() -> None:
    op.drop_table("shared_keys")
