"""HTTP for a dataset's transform steps (contract section 16; the operator's, scope
`admin`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from headwater.identity.deps import Admin
from headwater.ingestion import transform_service
from headwater.ingestion.schemas import (
    PreviewRead,
    PreviewRequest,
    TransformsRead,
    TransformsUpdate,
)
from headwater.web.deps import ReadSessionDep, RuntimeDep, SessionDep, StrictRoute
from headwater.web.responses import json_response

router = APIRouter(
    prefix="/admin/v1/clients/{client_id}/datasets/{dataset_id}/transforms",
    tags=["operator: datasets"],
    route_class=StrictRoute,
)

ClientIdPath = Annotated[str, Path(description="Ingestion client id.")]
DatasetIdPath = Annotated[str, Path(description="Dataset id, unique within its client.")]
STEPS_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "An unknown `op`, a missing or unknown member, an invalid JSON "
        "Pointer or value, more than one `dedupe` step or more than 50 steps: `errors` "
        "lists every problem with its step's index (`step`) and `field`."
    },
    404: {"description": "No such client or dataset."},
}


@router.put("", response_model=TransformsRead, responses=STEPS_ERRORS)
def set_transforms(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    body: TransformsUpdate,
    session: SessionDep,
    caller: Admin,
) -> object:
    """Store the steps as the dataset's next transform version. Transactions that begin
    after it (a push, a file's upload URL, an SFTP or email file, a resubmit) run them on
    every record that passed validation; one that began before keeps its version."""
    return json_response(
        transform_service.set_steps(
            session,
            author_id=caller.author_id,
            client_id=client_id,
            dataset_id=dataset_id,
            steps=body.steps,
        )
    )


@router.get("", response_model=TransformsRead, responses={404: STEPS_ERRORS[404]})
def get_transforms(
    client_id: ClientIdPath, dataset_id: DatasetIdPath, session: ReadSessionDep, _: Admin
) -> object:
    """The current version (`{"version": 0, "steps": []}` before any)."""
    return json_response(
        transform_service.current(session, client_id=client_id, dataset_id=dataset_id)
    )


@router.get(
    "/versions/{version}",
    response_model=TransformsRead,
    responses={404: {"description": "No such client, dataset or version."}},
)
def get_transform_version(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    version: Annotated[int, Path(ge=1, le=2**31 - 1, description="Transform version, from 1.")],
    session: ReadSessionDep,
    _: Admin,
) -> object:
    """One version of the dataset's steps, as it was stored (versions are never changed)."""
    return json_response(
        transform_service.version(
            session, client_id=client_id, dataset_id=dataset_id, number=version
        )
    )


@router.post("/preview", response_model=PreviewRead, responses=STEPS_ERRORS)
def preview_transforms(
    client_id: ClientIdPath,
    dataset_id: DatasetIdPath,
    body: PreviewRequest,
    runtime: RuntimeDep,
    _: Admin,
) -> object:
    """How each record would fare if pushed now (normalised, validated, through the
    steps given or the current ones, and checked for duplicates of stored records), in
    order. Nothing is stored and no event is written."""
    result = transform_service.preview(
        runtime.db,
        client_id=client_id,
        dataset_id=dataset_id,
        records=body.records,
        steps=body.steps,
    )
    return json_response(result)
