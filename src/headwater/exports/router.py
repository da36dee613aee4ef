"""Exports under /platform/v1, and the embedded store's signed download under /downloads."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Protocol

from fastapi import APIRouter, Depends, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from starlette.responses import FileResponse, Response

from headwater.errors import NotFound
from headwater.exports import service
from headwater.exports.schemas import MEDIA_TYPES, ExportCreate, ExportQuery, ExportRead
from headwater.files.stores import DOWNLOAD_PATH, EmbeddedStore, Store
from headwater.identity.deps import DataRead
from headwater.kit.pagination import Page
from headwater.web.deps import (
    ReadSessionDep,
    ReplicaSessionDep,
    Services,
    SessionDep,
    SignedRoute,
    StrictRoute,
    get_runtime,
)
from headwater.web.responses import json_response


class ExportsServices(Services, Protocol):
    """The running service's parts that exports use."""

    store: Store


ExportsRuntime = Annotated[ExportsServices, Depends(get_runtime)]

router = APIRouter(prefix="/platform/v1", tags=["exports"], route_class=StrictRoute)
downloads = APIRouter(tags=["download (embedded store)"], route_class=SignedRoute)

ExportIdPath = Annotated[uuid.UUID, Path(description="Export id.")]


@router.post(
    "/exports",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ExportRead,
    responses={
        202: {"description": "Queued: read the export until it is `completed` or `failed`."},
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
def create_export(
    body: ExportCreate, session: SessionDep, caller: DataRead, runtime: ExportsRuntime
) -> Response:
    """Export a dataset's records (all, or those ingested within the bounds) to a
    Parquet, NDJSON or CSV file that the worker writes; read the export for its
    `download_url`. The file holds the records committed when the export starts."""
    export = service.create(session, caller, body, store=runtime.store)
    session.commit()  # wakes the workers (`wakeups`)
    answer = service.view(export)
    return json_response(answer, status_code=status.HTTP_202_ACCEPTED)


@router.get(
    "/exports",
    response_model=Page[ExportRead],
    responses={403: {"description": "The token may not use this ingestion client."}},
)
def list_exports(
    query: Annotated[ExportQuery, Query()],
    session: ReplicaSessionDep,
    caller: DataRead,
    runtime: ExportsRuntime,
) -> Response:
    """The company's exports, newest first (a token limited to some ingestion clients
    sees theirs): each as `GET /platform/v1/exports/{export_id}` answers it, with a
    `download_url` once `completed`. Exports whose file was deleted at the end of its
    lifetime (`HEADWATER_EXPORT_RETENTION_HOURS`) are left out."""
    lifetime = timedelta(seconds=runtime.settings.export_url_lifetime_seconds)
    rows, total = service.list_exports(session, caller, query)
    items = [service.view(row, store=runtime.store, url_lifetime=lifetime) for row in rows]
    return json_response(Page[ExportRead].of(items, params=query, total=total))


@router.get(
    "/exports/{export_id}",
    response_model=ExportRead,
    responses={
        404: {"description": "No such export of the caller's company."},
        410: {"description": "`export_expired`: the file was deleted at the end of its lifetime."},
    },
)
def get_export(
    export_id: ExportIdPath, session: ReadSessionDep, caller: DataRead, runtime: ExportsRuntime
) -> Response:
    """An export; once `completed`, with a presigned `download_url` valid
    HEADWATER_EXPORT_URL_LIFETIME_SECONDS (3600), signed anew on each read."""
    lifetime = timedelta(seconds=runtime.settings.export_url_lifetime_seconds)
    export = service.get(session, caller, export_id)
    return json_response(service.view(export, store=runtime.store, url_lifetime=lifetime))


@downloads.get(
    DOWNLOAD_PATH + "{key}",
    response_class=Response,
    responses={
        200: {
            "description": "The export's file.",
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in MEDIA_TYPES.values()
            },
        },
        403: {"description": "Refused: a changed signature, key or query, or an expired URL."},
        404: {"description": "This service uses an S3 store, or the file was deleted."},
    },
)
async def download(
    key: Annotated[str, Path(description="The file's key, from the download URL.")],
    request: Request,
    runtime: ExportsRuntime,
    expires: Annotated[str | None, Query(description="Signed expiry (Unix time).")] = None,
    filename: Annotated[str | None, Query(description="Signed file name.")] = None,
    signature: Annotated[str | None, Query(description="HMAC-SHA256 signature.")] = None,
) -> Response:
    """The embedded store's signed GET (an export's `download_url`)."""
    store = runtime.store
    if not isinstance(store, EmbeddedStore):
        raise NotFound("This service stores files in S3; use the download_url it gave you.")
    service.check_download(
        store,
        key=key,
        expires=expires,
        filename=filename,
        signature=signature,
        unsigned=tuple(n for n in request.query_params if n not in service.DOWNLOAD_QUERY),
    )
    assert filename is not None
    if await run_in_threadpool(store.head, key) is None:
        raise NotFound("The file is not there (deleted at the end of its export's lifetime?).")
    suffix = filename.rsplit(".", 1)[-1]
    return FileResponse(
        store.path_of(key),
        media_type=MEDIA_TYPES.get(suffix, "application/octet-stream"),
        filename=filename,
    )
