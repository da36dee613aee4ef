"""A company's webhook endpoints: create one (its secret shown once), its deliveries
with every attempt, a test event, and a replay of a time window."""

from __future__ import annotations

from typing import get_args

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    ConsoleRuntime,
    Form,
    IdPath,
    Signed,
    needs,
    page,
    pages,
    redirect,
)
from headwater.events.outbox import TYPES
from headwater.kit.pagination import PageQuery
from headwater.web.deps import RuntimeDep
from headwater.webhooks import service
from headwater.webhooks.schemas import DeliveryQuery, DeliveryStatus, EndpointCreate, ReplayIn

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

SCOPE = "webhooks:manage"


@router.get("/webhooks")
def endpoint_list(request: Request, runtime: RuntimeDep, who: Signed) -> HTMLResponse:
    needs(who, SCOPE)
    query = PageQuery.model_validate(dict(request.query_params))
    with runtime.db.read_session() as session:
        found = service.list_endpoints(
            session, company_id=who.principal.actor.company_id, params=query
        )
    return page(
        request,
        "webhooks.html",
        who,
        items=found.data,
        total=found.total_entries,
        types=TYPES,
        pages=pages(request, query, found.total_entries),
    )


@router.post("/webhooks")
def create_endpoint(
    request: Request, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> HTMLResponse:
    """The new endpoint's page, with its signing secret: the one time it is shown."""
    needs(who, SCOPE)
    body = EndpointCreate.model_validate(
        {
            "url": fields.get("url", ""),
            "event_types": fields.all("event_types"),
            "description": fields.get("description", ""),
        }
    )
    with runtime.db.unit_of_work() as session:
        row, secret = service.create_endpoint(
            session,
            actor=who.principal.actor,
            data=body,
            box=runtime.secret_box,
            rules=service.UrlRules.of(runtime.settings),
        )
        view = service.view(row)
    return page(request, "webhook_created.html", who, status=201, e=view, secret=secret)


@router.get("/webhooks/{endpoint_id}")
def endpoint_page(
    request: Request, endpoint_id: IdPath, runtime: RuntimeDep, who: Signed
) -> HTMLResponse:
    needs(who, SCOPE)
    asked = {
        k: v for k, v in request.query_params.items() if v != "" and k not in ("sent", "queued")
    }
    query = DeliveryQuery.model_validate(asked)
    company_id = who.principal.actor.company_id
    with runtime.db.read_session() as session:
        endpoint = service.view(
            service.get_endpoint(session, company_id=company_id, endpoint_id=endpoint_id)
        )
        deliveries = service.list_deliveries(
            session, company_id=company_id, endpoint_id=endpoint_id, query=query
        )
    return page(
        request,
        "webhook.html",
        who,
        e=endpoint,
        deliveries=deliveries.data,
        total=deliveries.total_entries,
        asked=asked,
        delivery_statuses=get_args(DeliveryStatus),
        sent=request.query_params.get("sent"),
        queued=request.query_params.get("queued"),
        pages=pages(request, query, deliveries.total_entries),
    )


@router.post("/webhooks/{endpoint_id}/test")
def send_test(endpoint_id: IdPath, runtime: RuntimeDep, who: Changing) -> Response:
    needs(who, SCOPE)
    with runtime.db.unit_of_work() as session:
        event_id = service.send_test(
            session, company_id=who.principal.actor.company_id, endpoint_id=endpoint_id
        )
    return redirect(f"/console/webhooks/{endpoint_id}?sent={event_id}")


@router.post("/webhooks/{endpoint_id}/replay")
def replay(endpoint_id: IdPath, runtime: RuntimeDep, who: Changing, fields: Form) -> Response:
    needs(who, SCOPE)
    body = ReplayIn.model_validate(
        {
            "since": fields.utc("since"),
            "until": fields.utc("until"),
            "only_failed": fields.get("only_failed") == "on",
        }
    )
    with runtime.db.unit_of_work() as session:
        queued = service.replay(
            session, company_id=who.principal.actor.company_id, endpoint_id=endpoint_id, body=body
        )
    return redirect(f"/console/webhooks/{endpoint_id}?queued={queued}")
