"""What a company takes out and erases: exports (create, list, download) and erasures of
data subjects (create, list)."""

from __future__ import annotations

from datetime import timedelta
from typing import get_args

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    ConsoleRuntime,
    Form,
    Signed,
    needs,
    page,
    pages,
    redirect,
)
from headwater.exports import service as exports
from headwater.exports.schemas import ExportCreate, ExportFormat, ExportQuery
from headwater.subjects import service as subjects
from headwater.subjects.schemas import ErasureCreate, ErasureQuery

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

FORMATS = sorted(get_args(ExportFormat))


@router.get("/exports")
def export_list(request: Request, runtime: ConsoleRuntime, who: Signed) -> HTMLResponse:
    """Newest first, each with its download link once completed (signed anew, as the
    API's read does)."""
    needs(who, "data:read")
    asked = {k: v for k, v in request.query_params.items() if v and k != "created"}
    query = ExportQuery.model_validate(asked)
    lifetime = timedelta(seconds=runtime.settings.export_url_lifetime_seconds)
    with runtime.db.replica_session() as session:
        rows, total = exports.list_exports(session, who.principal, query)
        items = [exports.view(r, store=runtime.store, url_lifetime=lifetime) for r in rows]
    return page(
        request,
        "exports.html",
        who,
        items=items,
        total=total,
        formats=FORMATS,
        created=request.query_params.get("created"),
        pages=pages(request, query, total),
    )


@router.post("/exports")
def create_export(runtime: ConsoleRuntime, who: Changing, fields: Form) -> Response:
    needs(who, "data:read")
    body = ExportCreate.model_validate(
        {
            "client_id": fields.get("client_id"),
            "dataset_id": fields.get("dataset_id"),
            "format": fields.get("format"),
            "ingested_after": fields.utc("ingested_after"),
            "ingested_before": fields.utc("ingested_before"),
            "csv_formulas": fields.get("csv_formulas") or "escape",
        }
    )
    with runtime.db.unit_of_work() as session:  # its commit wakes the workers
        export = exports.create(session, who.principal, body, store=runtime.store)
        export_id = export.id
    return redirect(f"/console/exports?created={export_id}")


@router.get("/erasures")
def erasure_list(request: Request, runtime: ConsoleRuntime, who: Signed) -> HTMLResponse:
    needs(who, "data:erase")
    asked = {k: v for k, v in request.query_params.items() if v and k != "created"}
    query = ErasureQuery.model_validate(asked)
    with runtime.db.replica_session() as session:
        rows, total = subjects.list_erasures(session, who.principal, query)
        items = [subjects.view(r) for r in rows]
    return page(
        request,
        "erasures.html",
        who,
        items=items,
        total=total,
        created=request.query_params.get("created"),
        pages=pages(request, query, total),
    )


@router.post("/erasures")
def create_erasure(runtime: ConsoleRuntime, who: Changing, fields: Form) -> Response:
    """The subjects are typed one a line; they are kept only as HMACs."""
    needs(who, "data:erase")
    body = ErasureCreate.model_validate(
        {
            "subjects": [s.strip() for s in fields.get("subjects").splitlines() if s.strip()],
            "client_id": fields.get("client_id") or None,
            "dataset_id": fields.get("dataset_id") or None,
            "suppress": fields.get("suppress") == "on",
        }
    )
    with runtime.db.unit_of_work() as session:  # its commit wakes the workers
        erasure = subjects.create(session, who.principal, body)
        erasure_id = erasure.id
    return redirect(f"/console/erasures?created={erasure_id}")
