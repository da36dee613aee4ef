"""Operator API for inboxes (scope `admin`, contract section 12)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status

from headwater.identity.deps import Admin
from headwater.inbox import service
from headwater.inbox.schemas import InboxCreate, InboxQuery, InboxRead, InboxUpdate
from headwater.kit.pagination import Page
from headwater.web.deps import ReadSessionDep, RuntimeDep, SessionDep, StrictRoute
from headwater.web.responses import json_response

router = APIRouter(prefix="/admin/v1", tags=["operator: email"], route_class=StrictRoute)
InboxIdPath = Annotated[uuid.UUID, Path(description="The inbox's id.")]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such inbox."}}


@router.post(
    "/clients/{client_id}/datasets/{dataset_id}/inboxes",
    status_code=status.HTTP_201_CREATED,
    response_model=InboxRead,
    responses={404: {"description": "No such client, or it has no such dataset."}},
)
def create_inbox(
    client_id: str,
    dataset_id: str,
    body: InboxCreate,
    session: SessionDep,
    runtime: RuntimeDep,
    _: Admin,
) -> object:
    """An email address for the dataset: each supported attachment of a message from an
    allowed sender becomes one file transaction (`channel: "email"`)."""
    inbox = service.create_inbox(
        session, client_id=client_id, dataset_id=dataset_id, allowed_senders=body.allowed_senders
    )
    domain = runtime.settings.inbound_email_domain
    return json_response(service.view(inbox, domain=domain), status_code=201)


@router.get(
    "/inboxes",
    response_model=Page[InboxRead],
    responses={404: {"description": "`client_id` names no client."}},
)
def list_inboxes(
    session: ReadSessionDep,
    runtime: RuntimeDep,
    _: Admin,
    query: Annotated[InboxQuery, Query()],
) -> object:
    """Every inbox, or one client's (`client_id`), oldest first."""
    items, total = service.list_inboxes(session, query)
    domain = runtime.settings.inbound_email_domain
    return json_response(
        Page[InboxRead].of(
            [service.view(i, domain=domain) for i in items], params=query, total=total
        )
    )


@router.get("/inboxes/{inbox_id}", response_model=InboxRead, responses=NOT_FOUND)
def get_inbox(
    inbox_id: InboxIdPath, session: ReadSessionDep, runtime: RuntimeDep, _: Admin
) -> object:
    inbox = service.get_inbox(session, inbox_id)
    return json_response(service.view(inbox, domain=runtime.settings.inbound_email_domain))


@router.patch("/inboxes/{inbox_id}", response_model=InboxRead, responses=NOT_FOUND)
def update_inbox(
    inbox_id: InboxIdPath,
    body: InboxUpdate,
    session: SessionDep,
    runtime: RuntimeDep,
    _: Admin,
) -> object:
    """Replace the allowed senders."""
    inbox = service.update_inbox(session, inbox_id, body.allowed_senders)
    return json_response(service.view(inbox, domain=runtime.settings.inbound_email_domain))


@router.delete("/inboxes/{inbox_id}", status_code=status.HTTP_204_NO_CONTENT, responses=NOT_FOUND)
def delete_inbox(inbox_id: InboxIdPath, session: SessionDep, _: Admin) -> Response:
    """Delete the inbox: mail to its address is refused (550) from now on."""
    service.delete_inbox(session, inbox_id)
    return Response(status_code=204)
