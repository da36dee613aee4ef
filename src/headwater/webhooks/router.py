"""The event feed (scope `events:read`) and webhook endpoints (scope `webhooks:manage`),
contract section 13."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Path, Query, Response, status
from fastapi.concurrency import run_in_threadpool

from headwater.identity.deps import EventsRead, WebhooksManage
from headwater.kit.pagination import Page
from headwater.web.deps import (
    Paging,
    ReadSessionDep,
    Services,
    SessionDep,
    StrictRoute,
    get_runtime,
)
from headwater.web.responses import json_response
from headwater.webhooks import feed, service
from headwater.webhooks.crypto import SecretBox
from headwater.webhooks.schemas import (
    EVENT_EXAMPLES,
    DeliveryQuery,
    DeliveryRead,
    EndpointCreate,
    EndpointCreated,
    EndpointRead,
    EndpointUpdate,
    EventPage,
    EventQuery,
    ReplayIn,
    ReplayQueued,
    SecretRotated,
    SentTest,
)


class WebhooksServices(Services, Protocol):
    """The running service's parts that webhooks use."""

    secret_box: SecretBox


WebhooksRuntime = Annotated[WebhooksServices, Depends(get_runtime)]

router = APIRouter(prefix="/platform/v1", tags=["events and webhooks"], route_class=StrictRoute)
EndpointId = Annotated[uuid.UUID, Path(description="The webhook endpoint's id.")]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such endpoint (or another company's)."}
}


@router.get(
    "/events",
    response_model=EventPage,
    responses={
        200: {
            "content": {
                "application/json": {
                    "examples": {
                        name: {"summary": name, "value": {"data": [event], "next_cursor": "cDo0Mg"}}
                        for name, event in EVENT_EXAMPLES.items()
                    }
                }
            }
        },
        400: {"description": "`after` is not a cursor of this feed, or an unknown `type`."},
        410: {"description": "`cursor_expired`: events after the cursor were removed."},
    },
)
async def list_events(
    caller: EventsRead, runtime: WebhooksRuntime, query: Annotated[EventQuery, Query()]
) -> object:
    """The caller's company's events in the order they committed. Follow `next_cursor`
    (as `after`) to read every event exactly once, also while events are being written;
    an empty page answers the same cursor. Events are kept
    HEADWATER_EVENT_RETENTION_DAYS (30) days; a cursor older than that answers 410."""
    company_id = caller.actor.company_id
    page = await run_in_threadpool(
        lambda: feed.page(
            runtime.db,
            company_id=company_id,
            cursor=query.after,
            types=query.type,
            limit=query.limit,
            numbering=runtime.numbering,
        )
    )
    return EventPage.model_validate(page)


@router.post(
    "/webhook_endpoints",
    status_code=status.HTTP_201_CREATED,
    response_model=EndpointCreated,
    responses={400: {"description": "A URL that may not receive webhooks, saying why."}},
)
def create_endpoint(
    body: EndpointCreate, session: SessionDep, caller: WebhooksManage, runtime: WebhooksRuntime
) -> object:
    """Register a receiver. The answer holds its signing secret, shown only here (and by
    `rotate_secret`)."""
    row, secret = service.create_endpoint(
        session,
        actor=caller.actor,
        data=body,
        box=runtime.secret_box,
        rules=service.UrlRules.of(runtime.settings),
    )
    created = EndpointCreated(**service.view(row).model_dump(), secret=secret)
    return json_response(created, status_code=201)


@router.get("/webhook_endpoints", response_model=Page[EndpointRead])
def list_endpoints(session: ReadSessionDep, caller: WebhooksManage, query: Paging) -> object:
    """The company's endpoints, oldest first (never their secrets)."""
    return json_response(
        service.list_endpoints(session, company_id=caller.actor.company_id, params=query)
    )


@router.get("/webhook_endpoints/{endpoint_id}", response_model=EndpointRead, responses=NOT_FOUND)
def get_endpoint(
    endpoint_id: EndpointId, session: ReadSessionDep, caller: WebhooksManage
) -> object:
    row = service.get_endpoint(session, company_id=caller.actor.company_id, endpoint_id=endpoint_id)
    return json_response(service.view(row))


@router.patch(
    "/webhook_endpoints/{endpoint_id}",
    response_model=EndpointRead,
    responses={**NOT_FOUND, 400: {"description": "A URL that may not receive webhooks."}},
)
def update_endpoint(
    endpoint_id: EndpointId,
    body: EndpointUpdate,
    session: SessionDep,
    caller: WebhooksManage,
    runtime: WebhooksRuntime,
) -> object:
    """Change `url`, `event_types`, `description` or `status` (`disabled`: nothing is
    delivered; `enabled` again: pending deliveries resume)."""
    row = service.update_endpoint(
        session,
        company_id=caller.actor.company_id,
        endpoint_id=endpoint_id,
        changes=body,
        rules=service.UrlRules.of(runtime.settings),
    )
    return json_response(service.view(row))


@router.delete(
    "/webhook_endpoints/{endpoint_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=NOT_FOUND,
)
def delete_endpoint(
    endpoint_id: EndpointId, session: SessionDep, caller: WebhooksManage
) -> Response:
    """Delete the endpoint with its deliveries: from this answer on it is not found and
    nothing more is sent to it (an attempt already under way may still arrive); its
    deliveries and their attempts are removed by the worker within seconds."""
    service.delete_endpoint(session, company_id=caller.actor.company_id, endpoint_id=endpoint_id)
    return Response(status_code=204)


@router.post(
    "/webhook_endpoints/{endpoint_id}/rotate_secret",
    response_model=SecretRotated,
    responses=NOT_FOUND,
)
def rotate_secret(
    endpoint_id: EndpointId, session: SessionDep, caller: WebhooksManage, runtime: WebhooksRuntime
) -> object:
    """A new signing secret. For 24 h every delivery carries two signatures, one with
    each secret, so receivers can switch without losing a delivery."""
    secret = service.rotate_secret(
        session,
        company_id=caller.actor.company_id,
        endpoint_id=endpoint_id,
        box=runtime.secret_box,
    )
    return json_response(SecretRotated(secret=secret))


@router.get(
    "/webhook_endpoints/{endpoint_id}/deliveries",
    response_model=Page[DeliveryRead],
    responses=NOT_FOUND,
)
def list_deliveries(
    endpoint_id: EndpointId,
    session: ReadSessionDep,
    caller: WebhooksManage,
    query: Annotated[DeliveryQuery, Query()],
) -> object:
    """The endpoint's deliveries, newest first, each with its attempts (when, the
    receiver's status code or the error, how long it took)."""
    return json_response(
        service.list_deliveries(
            session, company_id=caller.actor.company_id, endpoint_id=endpoint_id, query=query
        )
    )


@router.post(
    "/webhook_endpoints/{endpoint_id}/test",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SentTest,
    responses=NOT_FOUND,
)
def send_test(endpoint_id: EndpointId, session: SessionDep, caller: WebhooksManage) -> object:
    """Send this endpoint alone a `webhook.test` event (`data`: `{"endpoint_id"}`),
    signed and retried like any other and listed in its deliveries; it is never in the
    event feed, and no other endpoint gets it. A disabled endpoint's test waits until
    the endpoint is enabled."""
    event_id = service.send_test(
        session, company_id=caller.actor.company_id, endpoint_id=endpoint_id
    )
    return json_response(SentTest(event_id=event_id), status_code=202)


@router.post(
    "/webhook_endpoints/{endpoint_id}/replay",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ReplayQueued,
    responses={**NOT_FOUND, 400: {"description": "`until` is not later than `since`."}},
)
def replay(
    endpoint_id: EndpointId, body: ReplayIn, session: SessionDep, caller: WebhooksManage
) -> object:
    """Deliver again the events created in [`since`, `until`) that the endpoint
    subscribes to (or only those whose delivery failed): new attempts with the same
    `webhook-id`."""
    queued = service.replay(
        session, company_id=caller.actor.company_id, endpoint_id=endpoint_id, body=body
    )
    return json_response(ReplayQueued(queued=queued), status_code=202)
