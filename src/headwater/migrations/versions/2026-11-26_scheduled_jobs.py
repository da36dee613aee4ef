"""scheduled_jobs: each periodic job's lease, so that it runs once a period across every
process (issue 33)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_jobs",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ran_by", sa.String(128), nullable=True),
        sa.Column("ran_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduled_jobs")),
    )


def downgrade() -> None:
    op.drop_table("scheduled_jobs")
