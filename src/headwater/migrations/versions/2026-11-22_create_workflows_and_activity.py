"""create workflows and activity

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 05:35:36.720706
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import headwater.db

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TRIGRAM_COLUMNS = ("name", "description")


def upgrade() -> None:
    op.create_table(
        "activity_entries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("resource_type", sa.String(length=32), nullable=False),
        sa.Column("resource_id", sa.Uuid(), nullable=False),
        sa.Column("author_id", sa.Uuid(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("before", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("after", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("timestamp", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_activity_entries_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_activity_entries")),
        sa.UniqueConstraint("company_id", "seq", name=op.f("uq_activity_entries_company_id")),
    )
    with op.batch_alter_table("activity_entries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_activity_company_action", ["company_id", "action", "timestamp", "seq"], unique=False
        )
        batch_op.create_index(
            "ix_activity_company_author",
            ["company_id", "author_id", "timestamp", "seq"],
            unique=False,
        )
        batch_op.create_index(
            "ix_activity_company_resource",
            ["company_id", "resource_id", "timestamp", "seq"],
            unique=False,
        )
        batch_op.create_index(
            "ix_activity_company_time", ["company_id", "timestamp", "seq"], unique=False
        )
        batch_op.create_index(
            "ix_activity_company_type_action",
            ["company_id", "resource_type", "action", "timestamp", "seq"],
            unique=False,
        )

    op.create_table(
        "activity_heads",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_activity_heads_company_id_companies")
        ),
        sa.PrimaryKeyConstraint("company_id", name=op.f("pk_activity_heads")),
    )
    op.create_table(
        "workflow_categories",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_workflow_categories_company_id_companies"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_categories")),
    )
    with op.batch_alter_table("workflow_categories", schema=None) as batch_op:
        batch_op.create_index(
            "ix_workflow_categories_company_created",
            ["company_id", "created_at", "id"],
            unique=False,
        )
        batch_op.create_index(
            "ix_workflow_categories_company_name", ["company_id", "name", "id"], unique=False
        )
        batch_op.create_index(
            "ix_workflow_categories_company_updated",
            ["company_id", "updated_at", "id"],
            unique=False,
        )

    op.create_table(
        "workflow_templates",
        sa.Column("category_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "steps",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["category_id"],
            ["workflow_categories.id"],
            name=op.f("fk_workflow_templates_category_id_workflow_categories"),
        ),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_workflow_templates_company_id_companies"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_templates")),
    )
    with op.batch_alter_table("workflow_templates", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_workflow_templates_category_id"), ["category_id"], unique=False
        )
        batch_op.create_index(
            "ix_workflow_templates_company_created",
            ["company_id", "created_at", "id"],
            unique=False,
        )

    op.create_table(
        "workflows",
        sa.Column("workflow_template_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("due_date", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("notification_date", headwater.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_workflows_company_id_companies")
        ),
        sa.ForeignKeyConstraint(
            ["workflow_template_id"],
            ["workflow_templates.id"],
            name=op.f("fk_workflows_workflow_template_id_workflow_templates"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflows")),
    )
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.create_index(
            "ix_workflows_company_created", ["company_id", "created_at", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_workflows_workflow_template_id"), ["workflow_template_id"], unique=False
        )

    op.create_table(
        "workflow_tasks",
        sa.Column("workflow_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", headwater.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Uuid(), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_workflow_tasks_company_id_companies")
        ),
        sa.ForeignKeyConstraint(
            ["workflow_id"], ["workflows.id"], name=op.f("fk_workflow_tasks_workflow_id_workflows")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_tasks")),
    )
    with op.batch_alter_table("workflow_tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_workflow_tasks_workflow_position", ["workflow_id", "position"], unique=False
        )

    if op.get_bind().dialect.name == "postgresql":
        # Case-insensitive substring filters (lower(x) LIKE '%..%') within one company.
        # Both extensions are "trusted": the database owner may create them.
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        for column in TRIGRAM_COLUMNS:
            op.execute(
                f"CREATE INDEX ix_workflow_categories_{column}_trgm ON workflow_categories "
                f"USING gin (company_id, lower({column}) gin_trgm_ops)"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for column in TRIGRAM_COLUMNS:
            op.execute(f"DROP INDEX IF EXISTS ix_workflow_categories_{column}_trgm")
    with op.batch_alter_table("workflow_tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_workflow_tasks_workflow_position")

    op.drop_table("workflow_tasks")
    with op.batch_alter_table("workflows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workflows_workflow_template_id"))
        batch_op.drop_index("ix_workflows_company_created")

    op.drop_table("workflows")
    with op.batch_alter_table("workflow_templates", schema=None) as batch_op:
        batch_op.drop_index("ix_workflow_templates_company_created")
        batch_op.drop_index(batch_op.f("ix_workflow_templates_category_id"))

    op.drop_table("workflow_templates")
    with op.batch_alter_table("workflow_categories", schema=None) as batch_op:
        batch_op.drop_index("ix_workflow_categories_company_updated")
        batch_op.drop_index("ix_workflow_categories_company_name")
        batch_op.drop_index("ix_workflow_categories_company_created")

    op.drop_table("workflow_categories")
    op.drop_table("activity_heads")
    with op.batch_alter_table("activity_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_activity_company_type_action")
        batch_op.drop_index("ix_activity_company_time")
        batch_op.drop_index("ix_activity_company_resource")
        batch_op.drop_index("ix_activity_company_author")
        batch_op.drop_index("ix_activity_company_action")

    op.drop_table("activity_entries")
