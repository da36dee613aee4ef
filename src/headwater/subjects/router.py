"""Erasures and suppressions under /platform/v1 (contract section 17), scope `data:erase`."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from starlette.responses import Response

from headwater.identity.deps import DataErase
from headwater.kit.pagination import Page, PageQuery
from headwater.subjects import service
from headwater.subjects.schemas import ErasureCreate, ErasureQuery, ErasureRead, SuppressionRead
from headwater.web.deps import (
    ReadSessionDep,
    ReplicaSessionDep,
    RuntimeDep,
    SessionDep,
    StrictRoute,
)
from headwater.web.responses import json_response

router = APIRouter(prefix="/platform/v1", tags=["data subjects"], route_class=StrictRoute)

ErasureIdPath = Annotated[uuid.UUID, Path(description="Erasure id.")]
SuppressionIdPath = Annotated[uuid.UUID, Path(description="Suppression id.")]


@router.post(
    "/erasures",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ErasureRead,
    responses={
        202: {"description": "Queued: read the erasure until it is `completed`."},
        400: {"description": "No subjects, more than 1000, or `dataset_id` without `client_id`."},
        403: {"description": "The token may not use this ingestion client."},
        404: {"description": "The client has no such dataset."},
    },
)
def create_erasure(
    body: ErasureCreate, session: SessionDep, caller: DataErase, runtime: RuntimeDep
) -> Response:
    """Erase data subjects: every stored record whose value at its dataset's
    `subject_key` equals a subject, every quarantined row holding a subject as a whole
    value, the raw files those came in, and every export holding such a record (then
    `erased`), in each covered dataset (those with a `subject_key`, of the named client
    and dataset, or of every client the token may use). The worker runs it within
    seconds; followers of the record feed read each erased record once more as
    `{"record_id", "erased": true}`. With `suppress`, the subjects' later records are not
    stored, on any channel, from this answer on. The subjects are kept only as HMACs."""
    erasure = service.create(session, caller, body)
    session.commit()  # wakes the workers (`wakeups`)
    return json_response(service.view(erasure), status_code=status.HTTP_202_ACCEPTED)


@router.get("/erasures", response_model=Page[ErasureRead])
def list_erasures(
    query: Annotated[ErasureQuery, Query()], session: ReplicaSessionDep, caller: DataErase
) -> Response:
    """The company's erasures, newest first (a token limited to some clients sees those
    made within them)."""
    rows, total = service.list_erasures(session, caller, query)
    items = [service.view(row) for row in rows]
    return json_response(Page[ErasureRead].of(items, params=query, total=total))


@router.get(
    "/erasures/{erasure_id}",
    response_model=ErasureRead,
    responses={404: {"description": "No such erasure of the caller's company."}},
)
def get_erasure(erasure_id: ErasureIdPath, session: ReadSessionDep, caller: DataErase) -> Response:
    """An erasure, with what it removed so far; `completed` once every copy is gone."""
    return json_response(service.view(service.get(session, caller, erasure_id)))


@router.get("/suppressions", response_model=Page[SuppressionRead])
def list_suppressions(
    query: Annotated[PageQuery, Query()], session: ReadSessionDep, caller: DataErase
) -> Response:
    """Subjects whose later records are not stored (one a subject of a suppressing
    erasure), newest first. Only ids: the subjects themselves are not kept."""
    items, total = service.list_suppressions(session, caller, query)
    return json_response(Page[SuppressionRead].of(items, params=query, total=total))


@router.delete(
    "/suppressions/{suppression_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={404: {"description": "No such suppression of the caller's company."}},
)
def lift_suppression(
    suppression_id: SuppressionIdPath, session: SessionDep, caller: DataErase
) -> Response:
    """Lift a suppression: the subject's records are stored again from the commit on."""
    service.lift(session, caller, suppression_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
