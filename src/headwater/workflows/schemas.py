"""Workflow API models (interface document 2.2-2.5; contract section 7)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints, model_validator

from headwater.kit.clock import InputDateTime, Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

WorkflowStatus = Literal["draft", "active", "paused", "completed", "cancelled"]
TaskType = Literal["manual", "approval", "review", "upload", "notification", "automated"]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Description = Annotated[str, StringConstraints(strip_whitespace=True, max_length=10_000)]
StepId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=64),
    Field(examples=["collect-documents"]),
]


def _patch_schema(schema: dict[str, Any], cls: type[Any]) -> None:
    """The OpenAPI of a PATCH body as it is checked: at least one member, and `null`
    allowed only for the members in `nullable`."""
    schema["minProperties"] = 1
    for name, prop in schema.get("properties", {}).items():
        if name in cls.nullable or "anyOf" not in prop:
            continue
        kept = [option for option in prop["anyOf"] if option.get("type") != "null"]
        if len(kept) == 1:
            del prop["anyOf"]
            prop.update(kept[0])
        else:
            prop["anyOf"] = kept
        if prop.get("default", ...) is None:
            del prop["default"]


class Update(Input):
    """A PATCH body: only the members sent change; null only where a field may be null."""

    model_config = Input.model_config | {"json_schema_extra": _patch_schema}
    nullable: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _not_empty_and_no_nulls(self) -> Self:
        sent = self.model_fields_set
        if not sent:
            raise ValueError("send at least one member to change")
        nulls = sorted(n for n in sent if getattr(self, n) is None and n not in self.nullable)
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


# --- categories ---------------------------------------------------------------------------


class CategoryCreate(Input):
    name: Name = Field(examples=["Onboarding"])
    description: Description = Field("", examples=["Everything a new supplier goes through."])


class CategoryUpdate(Update):
    name: Name | None = None
    description: Description | None = None


class CategoryRead(Output):
    id: uuid.UUID
    company_id: uuid.UUID
    name: str = Field(examples=["Onboarding"])
    description: str = Field(examples=["Everything a new supplier goes through."])
    created_at: Timestamp
    updated_at: Timestamp
    created_by: uuid.UUID
    updated_by: uuid.UUID


class CategoryQuery(PageQuery):
    name: str | None = Field(
        None, max_length=200, description="Case-insensitive substring of the name."
    )
    description: str | None = Field(
        None, max_length=200, description="Case-insensitive substring of the description."
    )
    sort_by: Literal["name", "description", "created_at", "updated_at"] = Field(
        "created_at", description="Ties are broken by id, so pages never overlap or skip."
    )
    sort_direction: Literal["asc", "desc"] = "asc"


# --- templates ----------------------------------------------------------------------------


class Step(Input):
    step_id: StepId
    name: Name = Field(examples=["Collect documents"])
    description: Description = ""
    type: TaskType = Field(examples=["upload"])


def _unique_steps(steps: Any) -> Any:
    if steps is not None:
        seen: set[str] = set()
        for step in steps:
            if step.step_id in seen:
                raise ValueError(f"step_id {step.step_id!r} appears twice")
            seen.add(step.step_id)
    return steps


class TemplateCreate(Input):
    category_id: uuid.UUID
    name: Name = Field(examples=["Supplier onboarding"])
    description: Description = ""
    steps: Annotated[list[Step], AfterValidator(_unique_steps)] = Field(
        min_length=1, max_length=100
    )


class TemplateUpdate(Update):
    category_id: uuid.UUID | None = None
    name: Name | None = None
    description: Description | None = None
    steps: Annotated[list[Step] | None, AfterValidator(_unique_steps)] = Field(
        None, min_length=1, max_length=100
    )


class StepRead(Output):
    step_id: str
    name: str
    description: str
    type: str


class TemplateRead(Output):
    id: uuid.UUID
    company_id: uuid.UUID
    category_id: uuid.UUID
    name: str
    description: str
    steps: list[StepRead]
    created_at: Timestamp
    updated_at: Timestamp
    created_by: uuid.UUID
    updated_by: uuid.UUID


class TemplateQuery(PageQuery):
    category_id: uuid.UUID | None = Field(None, description="Only this category's templates.")


# --- workflows and tasks ------------------------------------------------------------------


class WorkflowCreate(Input):
    workflow_template_id: uuid.UUID
    name: Name = Field(examples=["Onboard Globex"])
    description: Description = ""
    due_date: InputDateTime
    notification_date: InputDateTime | None = Field(
        None, description="When to remind; not after `due_date`."
    )


class WorkflowUpdate(Update):
    nullable: ClassVar[frozenset[str]] = frozenset({"notification_date"})

    name: Name | None = None
    description: Description | None = None
    due_date: InputDateTime | None = None
    notification_date: InputDateTime | None = None
    status: WorkflowStatus | None = Field(
        None, description="Moves through the state machine; an illegal move answers 409."
    )


class WorkflowRead(Output):
    id: uuid.UUID
    name: str
    description: str
    company_id: uuid.UUID
    workflow_template_id: uuid.UUID
    status: WorkflowStatus
    due_date: Timestamp
    notification_date: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp
    created_by: uuid.UUID
    updated_by: uuid.UUID


def _statuses(value: object) -> object:
    """`status=draft,active`: one value or several, comma-separated (repeating the
    parameter works too)."""
    values = [value] if isinstance(value, str) else value
    if isinstance(values, list):
        return [part.strip() for item in values for part in str(item).split(",")]
    return value


class WorkflowQuery(PageQuery):
    status: Annotated[list[WorkflowStatus] | None, BeforeValidator(_statuses)] = Field(
        None,
        description="One status or several, comma-separated (`active,paused`).",
        examples=["active,paused"],
        json_schema_extra={"type": "string", "pattern": "^[a-z]+(,[a-z]+)*$"},
    )
    workflow_template_id: uuid.UUID | None = Field(None, description="Made from this template.")
    name: str | None = Field(
        None, max_length=200, description="Case-insensitive substring of the name."
    )
    due_after: InputDateTime | None = Field(None, description="Due at or after (inclusive).")
    due_before: InputDateTime | None = Field(None, description="Due before (exclusive).")
    sort_by: Literal["name", "due_date", "created_at", "updated_at", "status"] = Field(
        "created_at", description="Ties are broken by id, so pages never overlap or skip."
    )
    sort_direction: Literal["asc", "desc"] = "asc"


class TaskUpdate(Update):
    name: Name | None = None
    description: Description | None = None
    type: TaskType | None = None


class TaskRead(Output):
    id: uuid.UUID
    company_id: uuid.UUID
    workflow_id: uuid.UUID
    step_id: str
    name: str
    description: str
    type: TaskType
    created_at: Timestamp
    updated_at: Timestamp
    updated_by: uuid.UUID


class TaskQuery(PageQuery):
    workflow_id: uuid.UUID = Field(description="The workflow whose tasks to list.")
