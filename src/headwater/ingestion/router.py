"""Data API under /platform/v1 (contract section 4) and the dataset registry under /admin/v1."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any, Protocol

import orjson
from fastapi import APIRouter, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from headwater.identity.deps import Admin, DataRead, DataWrite
from headwater.ingestion import changes, datasets, records, service, transactions, transform_service
from headwater.ingestion.errors import InvalidIdempotencyKey, NotJSON, RecordsInvalid
from headwater.ingestion.groups import PushQueue
from headwater.ingestion.readahead import ReadAhead
from headwater.ingestion.schemas import (
    ChangesPage,
    ChangesQuery,
    ClientQuery,
    DatasetCreate,
    DatasetQuery,
    DatasetRead,
    OptionsUpdate,
    PreviewRead,
    PreviewRecords,
    PushIn,
    PushResult,
    RecordQuery,
    RecordRead,
    SchemaUpdate,
    SchemaVersionRead,
    TransactionQuery,
    TransactionRead,
    TransformsRead,
)
from headwater.kit.clock import iso_ms
from headwater.kit.pagination import Page
from headwater.web.deps import (
    Paging,
    ReaderDep,
    ReadSessionDep,
    ReplicaSessionDep,
    RuntimeDep,
    Services,
    SessionDep,
    StrictRoute,
)
from headwater.web.problems import error_response
from headwater.web.responses import json_response


class IngestionServices(Services, Protocol):
    """The running service's parts that ingestion's routes use."""

    pushes: PushQueue
    feed_ahead: ReadAhead


router = APIRouter(prefix="/platform/v1", tags=["data"], route_class=StrictRoute)
admin = APIRouter(prefix="/admin/v1", tags=["operator: datasets"], route_class=StrictRoute)

NDJSON = "application/x-ndjson"
ClientIdPath = Annotated[str, Path(description="Ingestion client id.")]
DatasetIdPath = Annotated[str, Path(description="Dataset id, unique within its client.")]
VersionPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="Schema version number, from 1.")]


async def json_body(request: Request) -> bytes:
    """The raw push body, once its content type is JSON (else 415)."""
    given = request.headers.get("content-type", "")
    media, _, params = given.partition(";")
    charset = params.strip().lower().removeprefix("charset=").strip('"') if params else "utf-8"
    if media.strip().lower() != "application/json" or charset not in ("utf-8", "utf8"):
        raise NotJSON(given)
    return await request.body()


IDEMPOTENCY_KEY = (
    "Up to 255 printable ASCII characters. The same key with the same body within "
    "24 h answers the first answer again (header `Idempotent-Replayed: true`) and "
    "stores nothing; with another body, 409. Concurrent requests with one key: "
    "one stores, the others wait for it and answer its result."
)


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key header, checked (400), or None."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable():
        raise InvalidIdempotencyKey(
            "Idempotency-Key must be 1-255 printable ASCII characters.",
            errors=[{"location": "header", "field": "Idempotency-Key", "message": "invalid"}],
        )
    return key


PUSH_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"description": "The token may not use this ingestion client (or it does not exist)."},
    404: {"description": "The client has no such dataset."},
    409: {"description": "The Idempotency-Key was used with a different body."},
    413: {"description": "Body over 5 MiB or more records than the batch limit (1000)."},
    415: {"description": "Not application/json."},
    422: {
        "description": (
            "Records failed the dataset's schema; nothing stored. The body adds "
            "`transaction_id`, `error_count` and `errors`: up to 100 "
            "`{record, path, keyword, message}`."
        )
    },
}


@router.post(
    "/data/json",
    response_model=PushResult,
    responses=PUSH_RESPONSES,
    openapi_extra={
        # The body and the header are read in the route (the hot write path: one
        # dependency, not four), so they are described here.
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": IDEMPOTENCY_KEY,
                "schema": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 255,
                    "title": "Idempotency-Key",
                    "description": IDEMPOTENCY_KEY,
                },
            }
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": PushIn.model_json_schema()}},
        },
    },
)
async def push_json(caller: DataWrite, request: Request) -> Response:
    """Push one record (`data` an object) or a batch (`data` an array of objects).

    Records are normalised (the dataset's options), then validated against the dataset's
    current schema version; if any fails, nothing is stored. 200 means committed.
    JSON is read strictly: duplicate member names, NaN/Infinity, integers outside 64 bits,
    numbers beyond double range, invalid UTF-8 and nesting deeper than 32 levels are 400.
    """
    body = await json_body(request)
    key = idempotency_key(request)
    runtime: IngestionServices = request.app.state.runtime
    pushed = await runtime.pushes.push(
        caller,
        body=body,
        idempotency_key=key,
        limits=service.Limits.of(runtime.settings),
    )
    return push_response(pushed)


def push_response(pushed: service.Pushed) -> Response:
    """A push's outcome as HTTP: 200 with `PushResult` (written straight to JSON: the hot
    path, no model validation of values made just before), or the 422 problem of a
    rejected push."""
    headers = {"Idempotent-Replayed": "true"} if pushed.replayed else None
    transaction = pushed.transaction
    if not pushed.accepted:
        problem = RecordsInvalid(
            transaction_id=transaction["id"],
            error_count=transaction["error_count"],
            errors=transaction["errors"],
        )
        response = error_response(problem)
        response.headers.update(headers or {})
        return response
    body = orjson.dumps(
        {
            "transaction_id": transaction["id"],
            "status": transaction["status"],
            "client_id": transaction["client_id"],
            "dataset_id": transaction["dataset_id"],
            "schema_version": transaction["schema_version"],
            "records_received": transaction["records_received"],
            "records_accepted": transaction["records_accepted"],
            "received_at": iso_ms(transaction["created_at"]),
        }
    )
    return Response(body, media_type="application/json", headers=headers)


@router.get("/transactions/{transaction_id}", response_model=TransactionRead)
async def get_transaction(
    transaction_id: Annotated[uuid.UUID, Path(description="Transaction id.")],
    read: ReaderDep,
    caller: DataRead,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=30,
            description="Seconds to wait for the status to change (0-30, default 0): a "
            "transaction still `awaiting_upload` or `processing` is answered as soon as its "
            "status changes, or when the time is up, whichever comes first. No database "
            "connection is held while waiting.",
        ),
    ] = 0,
) -> object:
    """What happened to one push or file: status, counts, errors, times; while a file is
    `processing`, `records_processed` says how far it has got."""
    view = await read(transactions.transaction_read, caller, transaction_id)
    deadline = time.monotonic() + wait
    status = view.status
    while status in transactions.PENDING_STATUSES and time.monotonic() < deadline:
        await asyncio.sleep(min(WAIT_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        view = await read(transactions.transaction_read, caller, transaction_id)
        if view.status != status:
            break
    return json_response(view)


WAIT_POLL_SECONDS = 0.25


@router.get(
    "/transactions",
    response_model=Page[TransactionRead],
    responses={403: {"description": "The token may not use the named ingestion client."}},
)
def list_transactions(
    query: Annotated[TransactionQuery, Query()], session: ReplicaSessionDep, caller: DataRead
) -> object:
    """The company's transactions, newest first (a read that may lag: on the replica,
    if one is set)."""
    rows, total = transactions.list_transactions(session, caller, query)
    items = [transactions.transaction_view(r) for r in rows]
    return json_response(Page[TransactionRead].of(items, params=query, total=total))


@router.get(
    "/data",
    response_model=Page[RecordRead],
    responses={
        200: {
            "content": {
                NDJSON: {
                    "schema": {"type": "string"},
                    "example": '{"record_id":"…","transaction_id":"…","schema_version":1,'
                    '"ingested_at":"2026-11-22T09:30:00.000Z","data":{"order_id":"A-1"}}\n',
                }
            },
            "description": "A page, or with `Accept: application/x-ndjson` every match, "
            "one record per line (paging parameters are then ignored).",
        },
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
async def list_records(
    request: Request,
    query: Annotated[RecordQuery, Query()],
    runtime: RuntimeDep,
    caller: DataRead,
) -> Response:
    """Stored records of a dataset in storage order, paged or streamed as NDJSON."""
    if NDJSON in request.headers.get("accept", ""):
        lines = await run_in_threadpool(records.stream_records, runtime.db, caller, query)
        return StreamingResponse(lines, media_type=NDJSON)

    def page() -> Response:
        with runtime.db.replica_session() as session:  # a read that may lag
            items, total = records.list_records(session, caller, query)
        return json_response(Page[RecordRead].of(items, params=query, total=total))

    return await run_in_threadpool(page)


@router.get(
    "/data/changes",
    response_model=ChangesPage,
    responses={
        400: {"description": "`after` is not a cursor of this dataset's feed."},
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
async def list_changes(
    query: Annotated[ChangesQuery, Query()], request: Request, caller: DataRead
) -> Response:
    """A dataset's records in the order their transactions committed. Follow
    `next_cursor` (as `after`) to read every record exactly once, none skipped and none
    repeated, also while pushes and files are committing; an empty page answers the
    cursor it was given. With `wait`, an empty page waits that long for new records
    (long polling) and answers as soon as one commits."""
    runtime: IngestionServices = request.app.state.runtime
    body = await changes.changes(
        runtime.db,
        caller,
        query,
        commits=runtime.commits,
        ahead=runtime.feed_ahead,
        numbering=runtime.numbering,
        poll=runtime.poll(runtime.settings.feed_poll_seconds),
    )
    return Response(body, media_type="application/json")


@router.get("/datasets", response_model=Page[DatasetRead])
def list_datasets(
    query: Annotated[DatasetQuery, Query()], session: ReadSessionDep, caller: DataRead
) -> object:
    """Datasets of the ingestion clients this token may use: schema, versions, options."""
    items, total = datasets.list_visible(session, caller, query)
    return json_response(Page[DatasetRead].of(items, params=query, total=total))


@router.get(
    "/datasets/{dataset_id}",
    response_model=DatasetRead,
    responses={403: {"description": "The token may not use this ingestion client."}},
)
def get_dataset(
    dataset_id: DatasetIdPath,
    query: Annotated[ClientQuery, Query()],
    session: ReadSessionDep,
    caller: DataRead,
) -> object:
    datasets.usable_client(session, caller, query.client_id)
    return json_response(datasets.get(session, client_id=query.client_id, dataset_id=dataset_id))


@router.get(
    "/datasets/{dataset_id}/versions/{version}",
    response_model=SchemaVersionRead,
    responses={
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset, or it has no such version."},
    },
)
def get_dataset_schema_version(
    dataset_id: DatasetIdPath,
    version: VersionPath,
    query: Annotated[ClientQuery, Query()],
    session: ReadSessionDep,
    caller: DataRead,
) -> object:
    """One version of a dataset's schema, as it was registered (versions never change):
    what records of that `schema_version` were checked against."""
    datasets.usable_client(session, caller, query.client_id)
    return json_response(
        datasets.version(session, client_id=query.client_id, dataset_id=dataset_id, number=version)
    )


@router.get(
    "/datasets/{dataset_id}/transforms",
    response_model=TransformsRead,
    responses={
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
def get_dataset_transforms(
    dataset_id: DatasetIdPath,
    query: Annotated[ClientQuery, Query()],
    session: ReadSessionDep,
    caller: DataRead,
) -> object:
    """The dataset's current transform steps (`{"version": 0, "steps": []}` before any),
    as an operator set them: what the records stored from now on went through."""
    datasets.usable_client(session, caller, query.client_id)
    return json_response(
        transform_service.current(session, client_id=query.client_id, dataset_id=dataset_id)
    )


@router.post(
    "/datasets/{dataset_id}/transforms/preview",
    response_model=PreviewRead,
    responses={
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
def preview_dataset_transforms(
    dataset_id: DatasetIdPath,
    query: Annotated[ClientQuery, Query()],
    body: PreviewRecords,
    runtime: RuntimeDep,
    caller: DataRead,
) -> object:
    """How each record would fare if pushed now, through the current steps: normalised,
    validated, transformed and checked for duplicates of stored records, in order.
    Nothing is stored and no event is written (an operator may also try other steps:
    `POST /admin/v1/clients/{client_id}/datasets/{dataset_id}/transforms/preview`)."""
    with runtime.db.read_session() as session:
        datasets.usable_client(session, caller, query.client_id)
    result = transform_service.preview(
        runtime.db, client_id=query.client_id, dataset_id=dataset_id, records=body.records
    )
    return json_response(result)


# --- operator: the registry -------------------------------------------------------------------

REGISTRY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "Not a valid draft-06 schema, another draft, a failing example, a "
        "`$ref` that points outside the schema (only `#...` is accepted), or over a cost "
        "bound (an `enum` of more than 10,000 values, more than 10,000 subschemas)."
    },
    413: {"description": "The schema's JSON is over `HEADWATER_MAX_SCHEMA_BYTES` (512 KiB)."},
}


@admin.post(
    "/clients/{client_id}/datasets",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetRead,
    responses=REGISTRY_ERRORS | {409: {"description": "The client has that dataset id."}},
)
def register_dataset(
    client_id: ClientIdPath,
    body: DatasetCreate,
    session: SessionDep,
    caller: Admin,
    runtime: RuntimeDep,
) -> object:
    """Register a dataset with its first schema version (draft-06) and options."""
    created = datasets.register(
        session,
        author_id=caller.author_id,
        client_id=client_id,
        dataset_id=body.dataset_id,
        schema=body.schema_,
        options=body.options,
        max_schema_bytes=runtime.settings.max_schema_bytes,
    )
    return json_response(created, status_code=status.HTTP_201_CREATED)


@admin.put(
    "/clients/{client_id}/datasets/{dataset_id}/schema",
    response_model=DatasetRead,
    responses=REGISTRY_ERRORS
    | {
        409: {
            "description": "Compatibility `backward`: the new version refuses an example or "
            "one of the last 1000 stored records that the current version accepts."
        }
    },
)
def add_schema_version(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    body: SchemaUpdate,
    session: SessionDep,
    caller: Admin,
    runtime: RuntimeDep,
) -> object:
    """Add a schema version; it becomes current. Earlier versions are kept."""
    updated = datasets.add_version(
        session,
        author_id=caller.author_id,
        client_id=client_id,
        dataset_id=dataset_id,
        schema=body.schema_,
        max_schema_bytes=runtime.settings.max_schema_bytes,
    )
    return json_response(updated)


@admin.put("/clients/{client_id}/datasets/{dataset_id}/options", response_model=DatasetRead)
def set_dataset_options(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    body: OptionsUpdate,
    session: SessionDep,
    caller: Admin,
) -> object:
    """Replace a dataset's options (members left out take their defaults)."""
    updated = datasets.set_options(
        session,
        author_id=caller.author_id,
        client_id=client_id,
        dataset_id=dataset_id,
        options=body.options,
    )
    return json_response(updated)


@admin.get("/clients/{client_id}/datasets", response_model=Page[DatasetRead])
def admin_list_datasets(
    client_id: ClientIdPath, session: ReadSessionDep, _: Admin, paging: Paging
) -> object:
    items, total = datasets.list_for_client(session, client_id=client_id, params=paging)
    return json_response(Page[DatasetRead].of(items, params=paging, total=total))


@admin.get("/clients/{client_id}/datasets/{dataset_id}", response_model=DatasetRead)
def admin_get_dataset(
    client_id: ClientIdPath, dataset_id: DatasetIdPath, session: ReadSessionDep, _: Admin
) -> object:
    return json_response(datasets.get(session, client_id=client_id, dataset_id=dataset_id))


@admin.get(
    "/clients/{client_id}/datasets/{dataset_id}/versions",
    response_model=Page[SchemaVersionRead],
)
def list_schema_versions(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    session: ReadSessionDep,
    _: Admin,
    paging: Paging,
) -> object:
    items, total = datasets.versions(
        session, client_id=client_id, dataset_id=dataset_id, params=paging
    )
    return json_response(Page[SchemaVersionRead].of(items, params=paging, total=total))


@admin.get(
    "/clients/{client_id}/datasets/{dataset_id}/versions/{version}",
    response_model=SchemaVersionRead,
)
def get_schema_version(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    version: VersionPath,
    session: ReadSessionDep,
    _: Admin,
) -> object:
    return json_response(
        datasets.version(session, client_id=client_id, dataset_id=dataset_id, number=version)
    )
