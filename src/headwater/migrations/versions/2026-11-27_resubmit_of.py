"""resubmit_of: a resubmission names the transaction whose quarantined rows it took

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable, no default: PostgreSQL adds it without rewriting the table
    op.add_column("transactions", sa.Column("resubmit_of", sa.Uuid(), nullable=True))


def downgrade() -> None:
    op.drop_column("transactions", "resubmit_of")
