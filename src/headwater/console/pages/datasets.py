"""A company's datasets: each with its current schema, its versions and a diff between
two of them, its transform steps with a preview, and its records."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    Form,
    NamePath,
    Signed,
    needs,
    page,
    pages,
    pretty,
)
from headwater.console.diff import Line, json_diff
from headwater.console.sessions import SignedIn
from headwater.ingestion import datasets, records, transform_service
from headwater.ingestion.schemas import (
    DatasetQuery,
    DatasetRead,
    PreviewRecords,
    PreviewResult,
    RecordQuery,
    TransformsRead,
)
from headwater.web.deps import RuntimeDep

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

Version = Annotated[int | None, Query(ge=1, le=2**31 - 1)]


@router.get("/datasets")
def dataset_list(request: Request, runtime: RuntimeDep, who: Signed) -> HTMLResponse:
    needs(who, "data:read")
    query = DatasetQuery.model_validate(dict(request.query_params))
    with runtime.db.read_session() as session:
        items, total = datasets.list_visible(session, who.principal, query)
    return page(
        request, "datasets.html", who, items=items, total=total, pages=pages(request, query, total)
    )


@router.get("/datasets/{client_id}/{dataset_id}")
def dataset_page(
    request: Request,
    client_id: NamePath,
    dataset_id: NamePath,
    runtime: RuntimeDep,
    who: Signed,
    old: Version = None,
    new: Version = None,
) -> HTMLResponse:
    """The dataset, and with `old` and `new` the diff from one schema version to the
    other (by default, from the one before the current to the current)."""
    needs(who, "data:read")
    with runtime.db.read_session() as session:
        datasets.usable_client(session, who.principal, client_id)
        dataset = datasets.get(session, client_id=client_id, dataset_id=dataset_id)
        new = new or dataset.schema_version
        old = old or max(1, new - 1)
        a = datasets.version(session, client_id=client_id, dataset_id=dataset_id, number=old)
        b = datasets.version(session, client_id=client_id, dataset_id=dataset_id, number=new)
        steps = transform_service.current(session, client_id=client_id, dataset_id=dataset_id)
    return _dataset(
        request, who, dataset, steps, old=old, new=new, diff=json_diff(a.schema_, b.schema_)
    )


def _dataset(
    request: Request,
    who: SignedIn,
    dataset: DatasetRead,
    steps: TransformsRead,
    *,
    old: int,
    new: int,
    diff: list[Line],
    preview: list[tuple[PreviewResult, str | None]] | None = None,
    tried: str = "",
) -> HTMLResponse:
    return page(
        request,
        "dataset.html",
        who,
        d=dataset,
        transforms=steps,
        steps=pretty(steps.steps),
        preview=preview,
        tried=tried,
        schema=pretty(dataset.schema_),
        options=pretty(dataset.options.model_dump(mode="json")),
        old=old,
        new=new,
        diff=diff if old != new else None,
    )


@router.post("/datasets/{client_id}/{dataset_id}/preview")
def preview(
    request: Request,
    client_id: NamePath,
    dataset_id: NamePath,
    runtime: RuntimeDep,
    who: Changing,
    fields: Form,
) -> HTMLResponse:
    """Records typed in, through the current steps, as the API's preview (nothing stored)."""
    needs(who, "data:read")
    body = PreviewRecords.model_validate({"records": fields.json("records")})
    with runtime.db.read_session() as session:
        datasets.usable_client(session, who.principal, client_id)
        dataset = datasets.get(session, client_id=client_id, dataset_id=dataset_id)
        steps = transform_service.current(session, client_id=client_id, dataset_id=dataset_id)
    result = transform_service.preview(
        runtime.db, client_id=client_id, dataset_id=dataset_id, records=body.records
    )
    shown = [(r, None if r.output is None else pretty(r.output)) for r in result.results]
    version = dataset.schema_version
    return _dataset(
        request,
        who,
        dataset,
        steps,
        old=version,
        new=version,
        diff=[],
        preview=shown,
        tried=fields.get("records"),
    )


@router.get("/datasets/{client_id}/{dataset_id}/records")
def record_list(
    request: Request, client_id: NamePath, dataset_id: NamePath, runtime: RuntimeDep, who: Signed
) -> HTMLResponse:
    needs(who, "data:read")
    asked = {k: v for k, v in request.query_params.items() if v != ""}
    query = RecordQuery.model_validate(asked | {"client_id": client_id, "dataset_id": dataset_id})
    with runtime.db.replica_session() as session:  # a read that may lag, as the API's
        items, total = records.list_records(session, who.principal, query)
    return page(
        request,
        "records.html",
        who,
        client_id=client_id,
        dataset_id=dataset_id,
        items=[(r, pretty(r.data)) for r in items],
        total=total,
        asked=asked,
        pages=pages(request, query, total),
    )
