"""File upload URLs and quarantine under /platform/v1, the embedded store's signed PUT
under /uploads, and S3 bucket notifications under /hooks/v1."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Protocol

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from headwater.errors import MalformedJSON, NotFound
from headwater.files import quarantine, service
from headwater.files.schemas import (
    QuarantinedRowRead,
    QuarantineQuery,
    ResubmitIn,
    UploadUrl,
    UploadUrlQuery,
)
from headwater.files.stores import UPLOAD_PATH, EmbeddedStore, Store
from headwater.identity.deps import DataRead, DataWrite
from headwater.ingestion.api import TransactionRead
from headwater.kit.pagination import Page
from headwater.web.deps import (
    ReadSessionDep,
    Services,
    SessionDep,
    SignedRoute,
    StrictRoute,
    get_runtime,
)
from headwater.web.responses import json_response


class FilesServices(Services, Protocol):
    """The running service's parts that files use."""

    store: Store


FilesRuntime = Annotated[FilesServices, Depends(get_runtime)]

router = APIRouter(prefix="/platform/v1", tags=["data"], route_class=StrictRoute)
uploads = APIRouter(tags=["upload (embedded store)"], route_class=SignedRoute)
hooks = APIRouter(prefix="/hooks/v1", tags=["storage notifications"], route_class=StrictRoute)

TransactionIdPath = Annotated[uuid.UUID, Path(description="Transaction id.")]


@router.get(
    "/data/file_upload_url",
    response_model=UploadUrl,
    responses={
        403: {"description": "The token may not use this ingestion client (or it does not exist)."},
        404: {"description": "The client has no such dataset."},
        415: {"description": "`content_type` is not text/csv, application/json or NDJSON."},
    },
)
def file_upload_url(
    query: Annotated[UploadUrlQuery, Query()],
    session: SessionDep,
    caller: DataWrite,
    runtime: FilesRuntime,
) -> object:
    """A URL to PUT one file to, and the transaction that follows its processing.

    Send the file with `method` and `headers` to `upload_url` before `expires_at`. The
    platform notices the upload by itself and processes the file in the background:
    follow `GET /platform/v1/transactions/{transaction_id}` from `awaiting_upload` through
    `processing` to `completed`, `rejected` or `failed` (or `expired` if nothing came).
    """
    answer = service.create_upload_url(
        session, caller, query, store=runtime.store, settings=runtime.settings
    )
    return json_response(answer)


@router.get(
    "/transactions/{transaction_id}/quarantine",
    response_model=Page[QuarantinedRowRead],
    responses={404: {"description": "No such file transaction for this token."}},
)
def list_quarantine(
    transaction_id: TransactionIdPath,
    query: Annotated[QuarantineQuery, Query()],
    session: ReadSessionDep,
    caller: DataRead,
) -> object:
    """Rows of a file that failed validation under the `quarantine` policy, with their
    errors, in file order."""
    rows, total = quarantine.quarantined(session, caller, transaction_id, query)
    items = [QuarantinedRowRead.model_validate(r) for r in rows]
    return json_response(Page[QuarantinedRowRead].of(items, params=query, total=total))


@router.post(
    "/transactions/{transaction_id}/resubmit",
    response_model=TransactionRead,
    status_code=status.HTTP_201_CREATED,
    responses={
        400: {
            "description": "A correction's line is not an open quarantined row of the "
            "transaction (`not_quarantined`), or the body is not as described."
        },
        404: {"description": "No such file transaction for this token."},
        409: {
            "description": "The transaction has no open quarantined rows, or its file is"
            " still processing (its rows are not final until it is published)."
        },
    },
)
def resubmit(
    transaction_id: TransactionIdPath,
    caller: DataWrite,
    runtime: FilesRuntime,
    body: ResubmitIn | None = None,
) -> object:
    """Validate the open quarantined rows again, against the dataset's current schema, in
    a new transaction (its `resubmit_of` names this one): rows that pass are stored; the
    others move to the new transaction with their new errors. Answers the new
    transaction.

    With a body, `rows` corrects some rows by `line`: only those are resubmitted, each
    with its corrected `data`, checked as a push's record is; the other open rows stay
    where they are. A line that is not an open quarantined row of the transaction
    answers 400 `not_quarantined`, and nothing is resubmitted."""
    corrections = None if body is None else {row.line: row.data for row in body.rows}
    answer = quarantine.resubmit(runtime.db, caller, transaction_id, corrections)
    return json_response(answer, status_code=201)


_FILE_BODY = {"schema": {"type": "string", "format": "binary"}}


@uploads.put(
    UPLOAD_PATH + "{key}",
    status_code=200,
    response_class=Response,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The file, with the `Content-Type` the URL was signed for.",
            "content": {
                "text/csv": _FILE_BODY,
                "application/json": _FILE_BODY,
                "application/x-ndjson": _FILE_BODY,
            },
        }
    },
    responses={
        200: {"description": "Stored; the `ETag` header holds the body's MD5."},
        403: {
            "description": "Refused: a changed signature, path or query, an expired URL, "
            "a `Content-Type` other than the signed one, or a URL already used (also "
            "by another PUT of it that finished first)."
        },
        404: {"description": "This service uses an S3 store; PUT to its presigned URL."},
        413: {"description": "The body is over the signed size limit."},
    },
)
async def put_upload(
    key: Annotated[str, Path(description="The file's key, from the upload URL.")],
    request: Request,
    runtime: FilesRuntime,
    expires: Annotated[str | None, Query(description="Signed expiry (Unix time).")] = None,
    max_bytes: Annotated[str | None, Query(description="Signed size limit.")] = None,
    signature: Annotated[str | None, Query(description="HMAC-SHA256 signature.")] = None,
) -> Response:
    """The embedded store's signed PUT (the `upload_url` of an upload URL): the body is
    the file. Answers as a store does: 200 with an `ETag`, no body. A failed PUT leaves
    nothing and the URL may be used again until it expires; a retry need not wait for
    the service to notice an earlier PUT's dead connection: of two PUTs of one URL at
    once, the first to finish is the file and the other answers 403 (used)."""
    store = runtime.store
    if not isinstance(store, EmbeddedStore):
        raise NotFound("This service stores files in S3; use the upload_url it gave you.")
    put = service.SignedPut(
        key=key,
        expires=expires,
        max_bytes=max_bytes,
        signature=signature,
        content_type=request.headers.get("content-type"),
        content_length=request.headers.get("content-length"),
        unsigned=tuple(
            name
            for name in request.query_params
            if name not in ("expires", "max_bytes", "signature")
        ),
    )
    etag = await service.receive_upload(runtime.db, store, put, request.stream())
    return Response(status_code=200, headers={"ETag": f'"{etag}"'})


_S3_EVENT_EXAMPLE = {
    "Records": [
        {
            "eventName": "ObjectCreated:Put",
            "s3": {
                "bucket": {"name": "headwater-uploads"},
                "object": {"key": "uploads/5f0c.../0f6f...", "size": 1048576, "eTag": "9b2c..."},
            },
        }
    ]
}


@hooks.post(
    "/storage/events",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "properties": {"Records": {"type": "array"}}},
                    "example": _S3_EVENT_EXAMPLE,
                }
            },
        }
    },
    responses={
        401: {"description": "The notification secret is missing or wrong."},
        400: {"description": "The body is not JSON."},
    },
)
async def storage_events(
    request: Request,
    runtime: FilesRuntime,
    authorization: Annotated[
        str | None,
        Header(description="`Bearer <HEADWATER_STORAGE_NOTIFICATION_SECRET>`."),
    ] = None,
) -> dict[str, Any]:
    """S3 bucket notifications (`{"Records": [{"eventName": "ObjectCreated:Put", "s3":
    {...}}]}`). Each new object of a pending upload is checked (size, content type) and
    queued once; notifications may repeat: a repeat queues nothing."""
    service.check_notification_secret(runtime.settings, authorization)
    try:
        event = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise MalformedJSON("The notification body is not JSON.") from None
    queued = await run_in_threadpool(service.handle_notification, runtime.db, runtime.store, event)
    return {"queued": queued}
