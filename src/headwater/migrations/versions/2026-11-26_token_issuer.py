"""token_issuer: the `iss` every instance on one database signs and accepts, recorded by
the first to start (contract section 19)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 15:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "token_issuer",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("issuer", sa.String(2048), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_token_issuer")),
    )


def downgrade() -> None:
    op.drop_table("token_issuer")
