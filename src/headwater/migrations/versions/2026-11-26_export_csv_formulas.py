"""exports.csv_formulas: CSV cells a spreadsheet would run are escaped unless an export
asks for values as sent (contract section 14)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.add_column(
            sa.Column("csv_formulas", sa.String(16), nullable=False, server_default="escape")
        )


def downgrade() -> None:
    with op.batch_alter_table("exports") as batch:
        batch.drop_column("csv_formulas")
