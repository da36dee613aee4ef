"""Erasure and suppression API models (contract section 17)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from headwater.identity.schemas import ClientId
from headwater.ingestion.schemas import DatasetId
from headwater.kit.clock import Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

MAX_SUBJECTS = 1000
ErasureStatus = Literal["queued", "running", "completed", "failed"]
Subject = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class ErasureCreate(Input):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"subjects": ["ada@example.com"], "client_id": "acme-crm", "suppress": True}
            ]
        }
    )

    subjects: list[Subject] = Field(
        min_length=1,
        max_length=MAX_SUBJECTS,
        description="The values that identify the people (or customers) to erase, as their "
        "records hold them at the dataset's `subject_key` (a number as its JSON text). "
        "Kept only as HMACs, never as given.",
        examples=[["ada@example.com"]],
    )
    client_id: ClientId | None = Field(
        None,
        description="Only this ingestion client's datasets. Absent: every client the token "
        "may use.",
    )
    dataset_id: DatasetId | None = Field(
        None, description="Only this dataset of `client_id` (which it needs)."
    )
    suppress: bool = Field(
        False,
        strict=True,
        description="Also refuse the subjects' later records on every channel (counted in "
        "each transaction's `records_suppressed`) until the suppression is lifted.",
    )

    @model_validator(mode="after")
    def _dataset_needs_client(self) -> ErasureCreate:
        if self.dataset_id is not None and self.client_id is None:
            raise ValueError("dataset_id needs client_id")
        return self


class ErasureCounts(Output):
    records: int = Field(description="Stored records removed.", examples=[3])
    quarantined_rows: int = Field(
        description="Quarantined rows removed (a subject as a whole value in them).",
        examples=[1],
    )
    files: int = Field(description="Raw files removed (uploads, SFTP, email).", examples=[1])
    exports: int = Field(description="Exports that held a record, now `erased`.", examples=[0])


EXAMPLE: dict[str, Any] = {
    "erasure_id": "0b8f3c52-6a1e-4b9d-a2f1-5d0e7c9b4a10",
    "status": "completed",
    "subject_count": 1,
    "suppress": True,
    "client_id": "acme-crm",
    "dataset_id": None,
    "counts": {"records": 3, "quarantined_rows": 1, "files": 1, "exports": 0},
    "error": None,
    "created_at": "2026-11-28T09:30:00.000Z",
    "started_at": "2026-11-28T09:30:00.120Z",
    "completed_at": "2026-11-28T09:30:00.480Z",
}


class ErasureRead(Output):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE]})

    erasure_id: uuid.UUID
    status: ErasureStatus
    subject_count: int
    suppress: bool
    client_id: str | None = Field(description="The client it covers (null: every usable one).")
    dataset_id: str | None = Field(description="The dataset it covers (null: every one).")
    counts: ErasureCounts = Field(description="What it removed so far (all, once completed).")
    error: str | None = Field(description="Why a `failed` erasure failed.")
    created_at: Timestamp
    started_at: Timestamp | None = Field(description="When a worker last began running it.")
    completed_at: Timestamp | None


class ErasureQuery(PageQuery):
    status: ErasureStatus | None = Field(None, description="Only erasures in this status.")


class SuppressionRead(Output):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "suppression_id": "6d1a0f2b-3c4e-4f5a-8b9c-0d1e2f3a4b5c",
                    "erasure_id": "0b8f3c52-6a1e-4b9d-a2f1-5d0e7c9b4a10",
                    "client_id": "acme-crm",
                    "dataset_id": None,
                    "created_at": "2026-11-28T09:30:00.000Z",
                }
            ]
        }
    )

    suppression_id: uuid.UUID = Field(description="One subject of a suppressing erasure.")
    erasure_id: uuid.UUID
    client_id: str | None
    dataset_id: str | None
    created_at: Timestamp
