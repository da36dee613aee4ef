"""Export API models (contract section 14)."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from headwater.identity.schemas import ClientId
from headwater.ingestion.schemas import DatasetId
from headwater.kit.clock import InputDateTime, Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

ExportFormat = Literal["parquet", "ndjson", "csv"]
ExportStatus = Literal["queued", "running", "completed", "failed", "erased"]
CsvFormulas = Literal["escape", "as_sent"]
CSV_FORMULAS_DOC = (
    "CSV only: `escape` (the default) writes a text cell that begins with `=`, `+`, `-`, "
    "`@`, a tab or a carriage return with a leading `'`, so that no spreadsheet runs it as "
    "a formula; `as_sent` writes every value exactly as stored. Parquet and NDJSON always "
    "hold values exactly as stored."
)
MEDIA_TYPES = {
    "parquet": "application/vnd.apache.parquet",
    "ndjson": "application/x-ndjson",
    "csv": "text/csv",
}


class ExportCreate(Input):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "client_id": "acme-crm",
                    "dataset_id": "contacts",
                    "format": "csv",
                    "ingested_after": "2026-11-01T00:00:00Z",
                    "csv_formulas": "escape",
                }
            ]
        }
    )

    client_id: ClientId
    dataset_id: DatasetId
    format: ExportFormat = Field(
        description="`parquet` (typed columns), `ndjson` (records as `GET /platform/v1/data` "
        "streams them) or `csv` (one column per top-level property, values as sent)."
    )
    ingested_after: InputDateTime | None = Field(None, description="Records ingested at or after.")
    ingested_before: InputDateTime | None = Field(None, description="Records ingested before.")
    csv_formulas: CsvFormulas = Field("escape", description=CSV_FORMULAS_DOC)

    @model_validator(mode="after")
    def _ordered(self) -> ExportCreate:
        after, before = self.ingested_after, self.ingested_before
        if after is not None and before is not None and after >= before:
            raise ValueError("ingested_after must be before ingested_before")
        return self


EXAMPLE: dict[str, Any] = {
    "export_id": "5b0c3f0e-9a53-4a4e-8d43-2f8c0a3d7e11",
    "client_id": "acme-crm",
    "dataset_id": "contacts",
    "format": "parquet",
    "status": "completed",
    "ingested_after": None,
    "ingested_before": None,
    "csv_formulas": "escape",
    "record_count": 120000,
    "file_size": 3481920,
    "download_url": "https://headwater.example.com/downloads/5b0c3f0e9a534a4e8d432f8c0a3d7e11"
    "?expires=1795000000&filename=contacts-5b0c3f0e.parquet&signature=9f2c...",
    "expires_at": "2026-11-24T13:30:00.000Z",
    "available_until": "2026-11-25T12:30:02.000Z",
    "error": None,
    "created_at": "2026-11-24T12:30:00.000Z",
    "started_at": "2026-11-24T12:30:00.400Z",
    "completed_at": "2026-11-24T12:30:02.000Z",
}


class ExportRead(Output):
    model_config = ConfigDict(from_attributes=True, json_schema_extra={"examples": [EXAMPLE]})

    export_id: uuid.UUID
    client_id: str
    dataset_id: str
    format: ExportFormat
    status: ExportStatus
    ingested_after: Timestamp | None
    ingested_before: Timestamp | None
    csv_formulas: CsvFormulas = Field(description=CSV_FORMULAS_DOC)
    record_count: int | None = Field(description="Records in the file, once `completed`.")
    file_size: int | None = Field(description="The file's size in bytes, once `completed`.")
    download_url: str | None = Field(
        description="A presigned GET of the file, once `completed`; each read of the export "
        "signs a new one. Not in the export's events: read the export for one."
    )
    expires_at: Timestamp | None = Field(description="When `download_url` stops working.")
    available_until: Timestamp | None = Field(
        description="When the file is deleted (HEADWATER_EXPORT_RETENTION_HOURS after it "
        "completed); after that the export answers 410."
    )
    error: str | None = Field(description="Why a `failed` export failed.")
    created_at: Timestamp
    started_at: Timestamp | None = Field(description="When a worker began writing the file.")
    completed_at: Timestamp | None


class ExportQuery(PageQuery):
    client_id: ClientId | None = Field(None, description="Only this ingestion client's.")
    dataset_id: DatasetId | None = Field(None, description="Only this dataset's.")
    status: ExportStatus | None = Field(None, description="Only exports in this status.")
