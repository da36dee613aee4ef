"""Workflow configuration API under /app/v1 (interface document 4.4-4.7; contract section 7)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status

from headwater.identity.deps import WorkflowsRead, WorkflowsWrite
from headwater.kit.pagination import Page
from headwater.web.deps import ReaderDep, ReadSessionDep, RuntimeDep, SessionDep, StrictRoute
from headwater.web.responses import json_response
from headwater.workflows import service
from headwater.workflows.schemas import (
    CategoryCreate,
    CategoryQuery,
    CategoryRead,
    CategoryUpdate,
    TaskQuery,
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

router = APIRouter(prefix="/app/v1", tags=["workflows"], route_class=StrictRoute)

CategoryId = Annotated[uuid.UUID, Path(description="Workflow category id.")]
TemplateId = Annotated[uuid.UUID, Path(description="Workflow template id.")]
WorkflowId = Annotated[uuid.UUID, Path(description="Workflow id.")]
ActionId = Annotated[uuid.UUID, Path(description="Workflow task (action) id.")]
NO_CONTENT = status.HTTP_204_NO_CONTENT
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "Still referenced: delete or move what uses it first."}
}


@router.get("/workflow_categories", response_model=Page[CategoryRead])
async def list_categories(
    query: Annotated[CategoryQuery, Query()], runtime: RuntimeDep, caller: WorkflowsRead
) -> object:
    """The company's categories, filtered by name/description substrings, sorted and paged."""
    return Response(
        await service.list_categories_async(
            runtime.db, company_id=caller.actor.company_id, query=query
        ),
        media_type="application/json",
    )


@router.get("/workflow_categories/{id}", response_model=CategoryRead)
def get_category(id: CategoryId, session: ReadSessionDep, caller: WorkflowsRead) -> object:
    return service.get_category(session, company_id=caller.actor.company_id, category_id=id)


@router.post(
    "/workflow_categories", status_code=status.HTTP_201_CREATED, response_model=CategoryRead
)
def create_category(body: CategoryCreate, session: SessionDep, caller: WorkflowsWrite) -> object:
    return service.add_category(session, actor=caller.actor, data=body)


@router.patch("/workflow_categories/{id}", response_model=CategoryRead)
def update_category(
    id: CategoryId, body: CategoryUpdate, session: SessionDep, caller: WorkflowsWrite
) -> object:
    return service.update_category(session, actor=caller.actor, category_id=id, changes=body)


@router.delete("/workflow_categories/{id}", status_code=NO_CONTENT, responses=CONFLICT)
def delete_category(id: CategoryId, session: SessionDep, caller: WorkflowsWrite) -> Response:
    service.delete_category(session, actor=caller.actor, category_id=id)
    return Response(status_code=NO_CONTENT)


@router.get("/workflow_templates", response_model=Page[TemplateRead])
async def list_templates(
    query: Annotated[TemplateQuery, Query()], read: ReaderDep, caller: WorkflowsRead
) -> object:
    items, total = await read(
        service.list_templates, company_id=caller.actor.company_id, query=query
    )
    return json_response(Page[TemplateRead].of(items, params=query, total=total))


@router.get("/workflow_templates/{id}", response_model=TemplateRead)
def get_template(id: TemplateId, session: ReadSessionDep, caller: WorkflowsRead) -> object:
    return service.get_template(session, company_id=caller.actor.company_id, template_id=id)


@router.post(
    "/workflow_templates", status_code=status.HTTP_201_CREATED, response_model=TemplateRead
)
def create_template(body: TemplateCreate, session: SessionDep, caller: WorkflowsWrite) -> object:
    """A template: the ordered steps each workflow made from it gets as tasks."""
    return service.add_template(session, actor=caller.actor, data=body)


@router.patch("/workflow_templates/{id}", response_model=TemplateRead)
def update_template(
    id: TemplateId, body: TemplateUpdate, session: SessionDep, caller: WorkflowsWrite
) -> object:
    """Changes apply to workflows made from now on; existing tasks stay as they are."""
    return service.update_template(session, actor=caller.actor, template_id=id, changes=body)


@router.delete("/workflow_templates/{id}", status_code=NO_CONTENT, responses=CONFLICT)
def delete_template(id: TemplateId, session: SessionDep, caller: WorkflowsWrite) -> Response:
    service.delete_template(session, actor=caller.actor, template_id=id)
    return Response(status_code=NO_CONTENT)


@router.post("/workflows", status_code=status.HTTP_201_CREATED, response_model=WorkflowRead)
def create_workflow(body: WorkflowCreate, session: SessionDep, caller: WorkflowsWrite) -> object:
    """A workflow in `draft`, with one task per step of its template."""
    return service.add_workflow(session, actor=caller.actor, data=body)


@router.get("/workflows", response_model=Page[WorkflowRead])
async def list_workflows(
    query: Annotated[WorkflowQuery, Query()], read: ReaderDep, caller: WorkflowsRead
) -> object:
    """The company's workflows: filter by status (one or several, comma-separated),
    template, name (case-insensitive substring) and due date; sorted by `sort_by`, ties
    broken by id so pages never overlap or skip."""
    items, total = await read(
        service.list_workflows, company_id=caller.actor.company_id, query=query
    )
    return json_response(Page[WorkflowRead].of(items, params=query, total=total))


@router.get("/workflows/{workflow_id}", response_model=WorkflowRead)
def get_workflow(workflow_id: WorkflowId, session: ReadSessionDep, caller: WorkflowsRead) -> object:
    return service.get_workflow(
        session, company_id=caller.actor.company_id, workflow_id=workflow_id
    )


@router.patch(
    "/workflows/{workflow_id}",
    response_model=WorkflowRead,
    responses={409: {"description": "Illegal status transition; the body names both states."}},
)
def update_workflow(
    workflow_id: WorkflowId, body: WorkflowUpdate, session: SessionDep, caller: WorkflowsWrite
) -> object:
    """Change fields and move `status`: draft→active|cancelled, active→paused|completed|
    cancelled, paused→active|cancelled. Completed and cancelled are final."""
    return service.update_workflow(
        session, actor=caller.actor, workflow_id=workflow_id, changes=body
    )


@router.get(
    "/workflow_tasks",
    response_model=Page[TaskRead],
    responses={404: {"description": "No workflow with that id in the caller's company."}},
)
async def list_tasks(
    query: Annotated[TaskQuery, Query()], read: ReaderDep, caller: WorkflowsRead
) -> object:
    """A workflow's tasks, in the order of its template's steps."""
    items, total = await read(
        service.list_tasks,
        company_id=caller.actor.company_id,
        workflow_id=query.workflow_id,
        params=query,
    )
    return json_response(Page[TaskRead].of(items, params=query, total=total))


@router.get("/workflow_tasks/actions/{workflow_action_id}", response_model=TaskRead)
def get_task(
    workflow_action_id: ActionId, session: ReadSessionDep, caller: WorkflowsRead
) -> object:
    return service.get_task(session, company_id=caller.actor.company_id, task_id=workflow_action_id)


@router.patch("/workflow_tasks/actions/{workflow_action_id}", response_model=TaskRead)
def update_task(
    workflow_action_id: ActionId, body: TaskUpdate, session: SessionDep, caller: WorkflowsWrite
) -> object:
    return service.update_task(
        session, actor=caller.actor, task_id=workflow_action_id, changes=body
    )
