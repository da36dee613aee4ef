"""`headwater import`: categories, templates and workflows for a company from YAML or JSON.

The whole file is checked first, then written in one transaction through the same service
helpers the API uses, so every row gets its activity entry and a bad file stores nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError
from sqlalchemy.orm import Session

from headwater.errors import BadRequest
from headwater.kit.actor import Actor
from headwater.kit.clock import InputDateTime
from headwater.kit.schemas import Input
from headwater.workflows import service
from headwater.workflows.schemas import (
    CategoryCreate,
    Description,
    Name,
    Step,
    TemplateCreate,
    WorkflowCreate,
    WorkflowStatus,
)


class WorkflowItem(Input):
    name: Name
    description: Description = ""
    due_date: InputDateTime
    notification_date: InputDateTime | None = None
    status: WorkflowStatus = "draft"


class TemplateItem(Input):
    name: Name
    description: Description = ""
    steps: list[Step] = Field(min_length=1, max_length=100)
    workflows: list[WorkflowItem] = Field(default_factory=list)


class CategoryItem(Input):
    name: Name
    description: Description = ""
    templates: list[TemplateItem] = Field(default_factory=list)


class ImportDocument(Input):
    categories: list[CategoryItem]


@dataclass(frozen=True)
class ImportSummary:
    categories: int
    templates: int
    workflows: int


class InvalidImport(BadRequest):
    code = "invalid_import"


def read(path: Path) -> ImportDocument:
    """Parse and check a YAML or JSON file (by suffix; YAML is a superset of JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise InvalidImport(f"{path} cannot be read: {exc}") from None
    try:
        return ImportDocument.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"/{'/'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidImport(f"{path} is not a valid import file: {problems}") from None


def load(session: Session, *, actor: Actor, document: ImportDocument) -> ImportSummary:
    """Write the document for `actor`'s company in the caller's unit of work (which
    commits all of it, or nothing)."""
    counts = {"categories": 0, "templates": 0, "workflows": 0}
    for category in document.categories:
        row = service.add_category(
            session,
            actor=actor,
            data=CategoryCreate(name=category.name, description=category.description),
        )
        counts["categories"] += 1
        for template in category.templates:
            tpl = service.add_template(
                session,
                actor=actor,
                data=TemplateCreate(
                    category_id=row.id,
                    name=template.name,
                    description=template.description,
                    steps=template.steps,
                ),
            )
            counts["templates"] += 1
            for item in template.workflows:
                workflow = service.add_workflow(
                    session,
                    actor=actor,
                    data=WorkflowCreate(
                        workflow_template_id=tpl.id, **item.model_dump(exclude={"status"})
                    ),
                )
                for status in service.status_path(item.status):
                    service.change_workflow(
                        session, actor=actor, row=workflow, values={"status": status}
                    )
                counts["workflows"] += 1
    return ImportSummary(**counts)


def load_file(session: Session, *, actor: Actor, path: Path) -> ImportSummary:
    return load(session, actor=actor, document=read(path))
