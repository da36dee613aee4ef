"""File ingestion API models (contract section 4: upload URL, upload, quarantine)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from headwater.identity.schemas import ClientId
from headwater.ingestion.api import DatasetId
from headwater.kit.clock import Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

FileName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$"),
    Field(
        description=(
            "The file's name, 1-255 characters without control characters: metadata only, "
            "shown on the transaction; it never names anything in the store."
        ),
        examples=["orders-2026-11.csv"],
    ),
]


class UploadUrlQuery(Input):
    client_id: ClientId
    dataset_id: DatasetId
    file_name: FileName
    content_type: str = Field(
        description=(
            "`text/csv` (a header row, then one record a row), `application/json` (an "
            "array of records, or one record) or `application/x-ndjson` (one record a "
            "line). Any of them may be gzip-compressed (recognised by its content). "
            "Others: 415."
        ),
        examples=["text/csv"],
        # what is supported, as an enum; the answer to anything else is 415, not 400
        json_schema_extra={"enum": ["text/csv", "application/json", "application/x-ndjson"]},
    )


class UploadUrl(Output):
    upload_url: str = Field(
        description="PUT the file here, with `headers`, before `expires_at`.",
        examples=[
            "http://127.0.0.1:8000/uploads/0f6f...?expires=1795000000&max_bytes=5368709120"
            "&signature=9a1c..."
        ],
    )
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(examples=[{"Content-Type": "text/csv"}])
    transaction_id: uuid.UUID = Field(description="Follow the file's processing here.")
    file_id: uuid.UUID
    expires_at: Timestamp
    expires_in: int = Field(description="Seconds until the URL expires.", examples=[900])


class QuarantinedRowRead(Output):
    line: int = Field(description="Line of the file where the row starts.")
    record: int = Field(description="Index of the record in the file (from 0).")
    data: dict[str, Any] | None = Field(
        description="The record as read from the file (null when the row is not a record)."
    )
    raw: str | None = Field(description="The row's text, when it could not become a record.")
    errors: list[dict[str, Any]] = Field(
        examples=[[{"path": "/amount", "keyword": "type", "message": '"x" is not a number'}]]
    )
    resolved_by: uuid.UUID | None = Field(
        description="The re-submission's transaction that stored this row, if any."
    )


class QuarantineQuery(PageQuery):
    status: Literal["open", "resolved", "all"] = Field(
        "open", description="`open`: rows not yet stored (default); `resolved`; `all`."
    )


MAX_CORRECTIONS = 1000


class Correction(Input):
    line: int = Field(ge=1, strict=True, description="The quarantined row's `line`.", examples=[3])
    data: dict[str, Any] = Field(
        description="The row as it should have been: checked as a push's record is "
        "(normalised, validated against the dataset's current schema version).",
        examples=[{"order_id": "A-2", "amount": 2, "quantity": 2}],
    )


class ResubmitIn(Input):
    """Corrections of some quarantined rows, by line: only those rows are resubmitted."""

    rows: list[Correction] = Field(
        min_length=1,
        max_length=MAX_CORRECTIONS,
        description=f"1-{MAX_CORRECTIONS} corrected rows, each line at most once.",
    )

    @model_validator(mode="after")
    def _each_line_once(self) -> ResubmitIn:
        counted = Counter(row.line for row in self.rows)
        repeated = sorted(line for line, times in counted.items() if times > 1)
        if repeated:
            raise ValueError(f"lines given more than once: {repeated}")
        return self
