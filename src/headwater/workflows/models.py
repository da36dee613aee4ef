"""Workflow tables. Every row belongs to one company; every query filters on it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, JSONDocument, UTCDateTime


class Owned:
    """A company's row with its creation and last change, as the interface document shows."""

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("companies.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_by: Mapped[uuid.UUID] = mapped_column(Uuid)
    updated_by: Mapped[uuid.UUID] = mapped_column(Uuid)


class WorkflowCategory(Owned, Base):
    __tablename__ = "workflow_categories"
    # Sort orders of the list, each with the id tie-break. Substring filters on name and
    # description use trigram indexes on PostgreSQL (created in the migration).
    __table_args__ = (
        Index("ix_workflow_categories_company_created", "company_id", "created_at", "id"),
        Index("ix_workflow_categories_company_updated", "company_id", "updated_at", "id"),
        Index("ix_workflow_categories_company_name", "company_id", "name", "id"),
    )

    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)


class WorkflowTemplate(Owned, Base):
    __tablename__ = "workflow_templates"
    __table_args__ = (
        Index("ix_workflow_templates_company_created", "company_id", "created_at", "id"),
    )

    category_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("workflow_categories.id"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSONDocument)


class Workflow(Owned, Base):
    __tablename__ = "workflows"
    __table_args__ = (Index("ix_workflows_company_created", "company_id", "created_at", "id"),)

    workflow_template_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("workflow_templates.id"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    due_date: Mapped[datetime] = mapped_column(UTCDateTime)
    notification_date: Mapped[datetime | None] = mapped_column(UTCDateTime)


class WorkflowTask(Owned, Base):
    """A workflow action: one per step of the template the workflow was made from."""

    __tablename__ = "workflow_tasks"
    __table_args__ = (Index("ix_workflow_tasks_workflow_position", "workflow_id", "position"),)

    workflow_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("workflows.id"))
    position: Mapped[int] = mapped_column(Integer)
    step_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(String(16))
