"""Workflow use cases, each with its activity entries in the caller's unit of work."""

from __future__ import annotations

import functools
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select, String, Uuid, bindparam, func, select
from sqlalchemy.orm import Session

from headwater.activity import service as activity
from headwater.db import Database, pg_text
from headwater.events import outbox
from headwater.kit.actor import Actor
from headwater.kit.cache import LRU
from headwater.kit.clock import utcnow_ms
from headwater.kit.pagination import (
    PageQuery,
    PageStatements,
    page_json,
    paginate,
    shaped_statements,
)
from headwater.workflows.errors import (
    CategoryNotFound,
    IllegalTransition,
    InUse,
    NotifyAfterDue,
    TaskNotFound,
    TemplateNotFound,
    UnknownReference,
    WorkflowNotFound,
)
from headwater.workflows.models import (
    Owned,
    Workflow,
    WorkflowCategory,
    WorkflowTask,
    WorkflowTemplate,
)
from headwater.workflows.schemas import (
    CategoryCreate,
    CategoryQuery,
    CategoryRead,
    CategoryUpdate,
    TaskRead,
    TaskUpdate,
    TemplateCreate,
    TemplateQuery,
    TemplateRead,
    TemplateUpdate,
    WorkflowCreate,
    WorkflowQuery,
    WorkflowRead,
    WorkflowUpdate,
)

TRANSITIONS: dict[str, list[str]] = {
    "draft": ["active", "cancelled"],
    "active": ["paused", "completed", "cancelled"],
    "paused": ["active", "cancelled"],
    "completed": [],
    "cancelled": [],
}


def status_path(target: str) -> list[str]:
    """The shortest chain of legal moves from draft to `target`."""
    paths: dict[str, list[str]] = {"draft": []}
    queue = deque(["draft"])
    while queue:
        state = queue.popleft()
        for nxt in TRANSITIONS[state]:
            if nxt not in paths:
                paths[nxt] = [*paths[state], nxt]
                queue.append(nxt)
    return paths[target]


Row = TypeVar("Row", bound=Owned)

# Category list totals by (company, activity log position, filters): never stale.
_category_totals: LRU[int] = LRU(maxsize=4096)

# Each audited table: its activity resource type and the API model its snapshots use.
_AUDIT: dict[type[Owned], tuple[str, type[BaseModel]]] = {
    WorkflowCategory: ("workflow_category", CategoryRead),
    WorkflowTemplate: ("workflow_template", TemplateRead),
    Workflow: ("workflow", WorkflowRead),
    WorkflowTask: ("workflow_task", TaskRead),
}


def _snapshot(row: Owned) -> dict[str, Any]:
    """The resource as the API shows it: what `before` and `after` hold."""
    return _AUDIT[type(row)][1].model_validate(row).model_dump(mode="json")


def _audited_create(session: Session, actor: Actor, row: Row) -> Row:
    now = utcnow_ms()
    for name, value in (
        ("id", uuid.uuid4()),
        ("company_id", actor.company_id),
        ("created_at", now),
        ("updated_at", now),
        ("created_by", actor.author_id),
        ("updated_by", actor.author_id),
    ):
        setattr(row, name, value)
    session.add(row)
    session.flush()
    activity.record(
        session,
        actor=actor,
        action="create",
        resource_type=_AUDIT[type(row)][0],
        resource_id=row.id,
        before=None,
        after=_snapshot(row),
    )
    return row


def _audited_update(session: Session, actor: Actor, row: Row, changes: dict[str, Any]) -> Row:
    before = _snapshot(row)
    for name, value in changes.items():
        setattr(row, name, value)
    row.updated_at = utcnow_ms()
    row.updated_by = actor.author_id
    session.flush()
    activity.record(
        session,
        actor=actor,
        action="update",
        resource_type=_AUDIT[type(row)][0],
        resource_id=row.id,
        before=before,
        after=_snapshot(row),
    )
    return row


def _audited_delete(session: Session, actor: Actor, row: Owned) -> None:
    before = _snapshot(row)
    session.delete(row)
    session.flush()
    activity.record(
        session,
        actor=actor,
        action="delete",
        resource_type=_AUDIT[type(row)][0],
        resource_id=row.id,
        before=before,
        after=None,
    )


def _owned(
    session: Session, model: type[Row], company_id: uuid.UUID, row_id: uuid.UUID
) -> Row | None:
    """A row of this company, or None: another company's row is as good as missing."""
    row = session.get(model, row_id)
    return row if row is not None and row.company_id == company_id else None


# --- categories ---------------------------------------------------------------------------


def add_category(session: Session, *, actor: Actor, data: CategoryCreate) -> WorkflowCategory:
    """Create a category and its activity entry; flushes; the unit of work commits."""
    return _audited_create(session, actor, WorkflowCategory(**data.model_dump()))


def get_category(
    session: Session, *, company_id: uuid.UUID, category_id: uuid.UUID
) -> WorkflowCategory:
    row = _owned(session, WorkflowCategory, company_id, category_id)
    if row is None:
        raise CategoryNotFound(f"No workflow category has the id {category_id}.")
    return row


_CATEGORY_SHOWN = tuple(CategoryRead.model_fields)


@functools.cache  # a bounded set of shapes: 2 filters x 4 sorts x 2 directions
def _build_category_statements(
    filtered: tuple[str, ...], sort_by: str, desc: bool
) -> tuple[Select[Any], Select[Any]]:
    # typed parameters: the statements are also compiled with their values for EXPLAIN
    table = WorkflowCategory
    where = [table.company_id == bindparam("company_id", type_=Uuid())]
    for name in filtered:
        # lower(column) LIKE: the form the PostgreSQL trigram indexes serve
        pattern = bindparam(name, type_=String())
        where.append(func.lower(getattr(table, name)).like(pattern, escape="\\"))
    order = [getattr(table, sort_by), table.id]
    page, count = shaped_statements(
        [getattr(table, name) for name in _CATEGORY_SHOWN],
        where,
        [c.desc() if desc else c.asc() for c in order],
        table.id,
    )
    return activity.with_log_position(page), count


def _category_shape(
    company_id: uuid.UUID, query: CategoryQuery
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A category list's shape (`_build_category_statements`'s arguments) and parameters."""
    params: dict[str, Any] = {
        "company_id": company_id,
        "offset": query.offset,
        "limit": query.page_size,
    }
    filtered = []
    for name in ("name", "description"):
        needle = getattr(query, name)
        if needle:
            filtered.append(name)
            params[name] = _contains_pattern(needle)
    return (tuple(filtered), query.sort_by, query.sort_direction == "desc"), params


def category_statements(*, company_id: uuid.UUID, query: CategoryQuery) -> PageStatements:
    """The page and count statements of a category list, for the caller's company only."""
    shape, params = _category_shape(company_id, query)
    page, count = _build_category_statements(*shape)
    return PageStatements(page=page, count=count, params=params)


@functools.cache
def _category_text(shape: tuple[Any, ...]) -> tuple[str, str]:
    page, count = _build_category_statements(*shape)
    return pg_text(page), pg_text(count)


def list_categories(session: Session, *, company_id: uuid.UUID, query: CategoryQuery) -> bytes:
    """One page of the company's categories and their total, as the JSON answer.

    A hot read path, built like the activity search: statements reused per shape, Core
    rows straight to JSON, and the total cached by the company's activity log position
    (every category change is audited, so the position versions the count).
    """
    statements = category_statements(company_id=company_id, query=query)
    rows, position = activity.page_and_position(session, statements, company_id)
    key = (company_id, position, query.name, query.description)
    total = _category_totals.get_or_compute(
        key, lambda: session.connection().scalar(statements.count, statements.params) or 0
    )
    return _category_page(query, total, rows)


def _category_page(query: CategoryQuery, total: int, rows: Sequence[Any]) -> bytes:
    return page_json(
        page=query.page,
        page_size=query.page_size,
        total=total,
        fields=_CATEGORY_SHOWN,
        rows=rows,
    )


async def list_categories_async(
    db: Database, *, company_id: uuid.UUID, query: CategoryQuery
) -> bytes:
    """`list_categories` for the API: on the event loop on PostgreSQL (as the activity
    search), else in a read session on a thread. Both answer the same bytes."""
    if not db.reads_on_loop:
        return await db.read_on_thread(
            lambda session: list_categories(session, company_id=company_id, query=query)
        )
    shape, params = _category_shape(company_id, query)
    rows, total = await activity.page_on_loop(
        db,
        _category_text(shape),
        params,
        totals=_category_totals,
        key=lambda position: (company_id, position, query.name, query.description),
    )
    return _category_page(query, total, rows)


def _contains_pattern(needle: str) -> str:
    """A case-insensitive LIKE pattern for a substring, its wildcards taken literally."""
    escaped = needle.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def update_category(
    session: Session, *, actor: Actor, category_id: uuid.UUID, changes: CategoryUpdate
) -> WorkflowCategory:
    row = get_category(session, company_id=actor.company_id, category_id=category_id)
    _audited_update(session, actor, row, changes.changes())
    session.flush()
    return row


def delete_category(session: Session, *, actor: Actor, category_id: uuid.UUID) -> None:
    row = get_category(session, company_id=actor.company_id, category_id=category_id)
    used = session.scalar(select(func.count()).where(WorkflowTemplate.category_id == row.id))
    if used:
        raise InUse(f"The category has {used} template(s); delete or move them first.")
    _audited_delete(session, actor, row)
    session.flush()


# --- templates ----------------------------------------------------------------------------


def _category_ref(session: Session, actor: Actor, category_id: uuid.UUID) -> None:
    if _owned(session, WorkflowCategory, actor.company_id, category_id) is None:
        raise UnknownReference("category_id", f"No workflow category has the id {category_id}.")


def add_template(session: Session, *, actor: Actor, data: TemplateCreate) -> WorkflowTemplate:
    """Create a template and its activity entry; flushes; the unit of work commits."""
    _category_ref(session, actor, data.category_id)
    return _audited_create(session, actor, WorkflowTemplate(**data.model_dump()))


def get_template(
    session: Session, *, company_id: uuid.UUID, template_id: uuid.UUID
) -> WorkflowTemplate:
    row = _owned(session, WorkflowTemplate, company_id, template_id)
    if row is None:
        raise TemplateNotFound(f"No workflow template has the id {template_id}.")
    return row


def list_templates(
    session: Session, *, company_id: uuid.UUID, query: TemplateQuery
) -> tuple[Sequence[WorkflowTemplate], int]:
    stmt = select(WorkflowTemplate).where(WorkflowTemplate.company_id == company_id)
    if query.category_id is not None:
        stmt = stmt.where(WorkflowTemplate.category_id == query.category_id)
    return paginate(
        session,
        stmt,
        WorkflowTemplate.created_at,
        WorkflowTemplate.id,
        params=query,
    )


def update_template(
    session: Session, *, actor: Actor, template_id: uuid.UUID, changes: TemplateUpdate
) -> WorkflowTemplate:
    row = get_template(session, company_id=actor.company_id, template_id=template_id)
    values = changes.model_dump(include=changes.model_fields_set)
    if "category_id" in values:
        _category_ref(session, actor, values["category_id"])
    _audited_update(session, actor, row, values)
    session.flush()
    return row


def delete_template(session: Session, *, actor: Actor, template_id: uuid.UUID) -> None:
    row = get_template(session, company_id=actor.company_id, template_id=template_id)
    used = session.scalar(select(func.count()).where(Workflow.workflow_template_id == row.id))
    if used:
        raise InUse(f"{used} workflow(s) were made from this template; it cannot be deleted.")
    _audited_delete(session, actor, row)
    session.flush()


# --- workflows and tasks ------------------------------------------------------------------


def _check_dates(due_date: datetime, notification_date: datetime | None) -> None:
    if notification_date is not None and notification_date > due_date:
        raise NotifyAfterDue()


def add_workflow(session: Session, *, actor: Actor, data: WorkflowCreate) -> Workflow:
    """A workflow in `draft`, with one task per step of its template, and their activity
    entries; flushes; the unit of work commits (`headwater import`: a whole file in one)."""
    _check_dates(data.due_date, data.notification_date)
    template = _owned(session, WorkflowTemplate, actor.company_id, data.workflow_template_id)
    if template is None:
        raise UnknownReference(
            "workflow_template_id", f"No workflow template has the id {data.workflow_template_id}."
        )
    workflow = _audited_create(session, actor, Workflow(**data.model_dump(), status="draft"))
    for position, step in enumerate(template.steps):
        _audited_create(
            session,
            actor,
            WorkflowTask(
                workflow_id=workflow.id,
                position=position,
                step_id=step["step_id"],
                name=step["name"],
                description=step["description"],
                type=step["type"],
            ),
        )
    return workflow


def get_workflow(session: Session, *, company_id: uuid.UUID, workflow_id: uuid.UUID) -> Workflow:
    row = _owned(session, Workflow, company_id, workflow_id)
    if row is None:
        raise WorkflowNotFound(f"No workflow has the id {workflow_id}.")
    return row


_WORKFLOW_SORT = {
    "name": Workflow.name,
    "due_date": Workflow.due_date,
    "created_at": Workflow.created_at,
    "updated_at": Workflow.updated_at,
    "status": Workflow.status,
}


def list_workflows(
    session: Session, *, company_id: uuid.UUID, query: WorkflowQuery
) -> tuple[Sequence[Workflow], int]:
    """One page of the company's workflows, filtered and sorted; ties broken by id."""
    stmt = select(Workflow).where(Workflow.company_id == company_id)
    if query.status:
        stmt = stmt.where(Workflow.status.in_(query.status))
    if query.workflow_template_id is not None:
        stmt = stmt.where(Workflow.workflow_template_id == query.workflow_template_id)
    if query.name:
        stmt = stmt.where(
            func.lower(Workflow.name).like(_contains_pattern(query.name), escape="\\")
        )
    if query.due_after is not None:
        stmt = stmt.where(Workflow.due_date >= query.due_after)
    if query.due_before is not None:
        stmt = stmt.where(Workflow.due_date < query.due_before)
    column = _WORKFLOW_SORT[query.sort_by]
    descending = query.sort_direction == "desc"
    return paginate(
        session,
        stmt,
        column.desc() if descending else column.asc(),
        Workflow.id.desc() if descending else Workflow.id.asc(),
        params=query,
    )


def update_workflow(
    session: Session, *, actor: Actor, workflow_id: uuid.UUID, changes: WorkflowUpdate
) -> Workflow:
    row = get_workflow(session, company_id=actor.company_id, workflow_id=workflow_id)
    change_workflow(session, actor=actor, row=row, values=changes.changes())
    session.flush()
    return row


def change_workflow(
    session: Session, *, actor: Actor, row: Workflow, values: dict[str, Any]
) -> None:
    """Apply changes through the state machine, with the activity entry; the caller commits."""
    wanted = values.get("status")
    if wanted is not None and wanted not in TRANSITIONS[row.status]:
        raise IllegalTransition(row.status, wanted, TRANSITIONS[row.status])
    _check_dates(
        values.get("due_date", row.due_date), values.get("notification_date", row.notification_date)
    )
    previous = row.status
    _audited_update(session, actor, row, values)
    if row.status != previous:
        data = WorkflowRead.model_validate(row).model_dump(mode="json")
        outbox.write(
            session.connection(),
            [
                outbox.event(
                    "workflow.status_changed",
                    company_id=row.company_id,
                    data=data | {"previous_status": previous},
                    created_at=row.updated_at,
                )
            ],
        )


def list_tasks(
    session: Session, *, company_id: uuid.UUID, workflow_id: uuid.UUID, params: PageQuery
) -> tuple[Sequence[WorkflowTask], int]:
    get_workflow(session, company_id=company_id, workflow_id=workflow_id)
    stmt = select(WorkflowTask).where(
        WorkflowTask.company_id == company_id, WorkflowTask.workflow_id == workflow_id
    )
    return paginate(session, stmt, WorkflowTask.position, WorkflowTask.id, params=params)


def get_task(session: Session, *, company_id: uuid.UUID, task_id: uuid.UUID) -> WorkflowTask:
    row = _owned(session, WorkflowTask, company_id, task_id)
    if row is None:
        raise TaskNotFound(f"No workflow task has the id {task_id}.")
    return row


def update_task(
    session: Session, *, actor: Actor, task_id: uuid.UUID, changes: TaskUpdate
) -> WorkflowTask:
    row = get_task(session, company_id=actor.company_id, task_id=task_id)
    _audited_update(session, actor, row, changes.changes())
    session.flush()
    return row
