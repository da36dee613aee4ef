"""Ingestion API models (contract sections 4 and 5)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, StringConstraints

from headwater.identity.schemas import ClientId
from headwater.ingestion import normalise
from headwater.kit import strictjson
from headwater.kit.clock import InputDateTime, Timestamp
from headwater.kit.pagination import Digits, PageQuery
from headwater.kit.schemas import Input, Output

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
DatasetId = Annotated[
    str,
    StringConstraints(pattern=ID_PATTERN),
    Field(description="Dataset id: `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.", examples=["orders"]),
]


def _pointer(value: Any) -> Any:
    from headwater.ingestion.transforms import PointerError, pointer

    try:
        pointer(value)
    except PointerError as exc:
        raise ValueError(f"subject_key {exc}") from None
    return value


SubjectKey = Annotated[str, StringConstraints(max_length=512), BeforeValidator(_pointer)]
TransactionStatus = Literal[
    "awaiting_upload", "processing", "completed", "rejected", "failed", "expired"
]

EXAMPLE_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "customer-email": {"type": "string", "format": "email"},
        "amount": {"type": "number", "minimum": 0},
        "placed_at": {"type": "string", "format": "date-time"},
    },
    "required": ["order_id", "amount"],
    "examples": [{"order_id": "A-1", "amount": 12.5}],
}


class DatasetOptions(Input):
    """How records of a dataset are normalised and what a file's invalid rows do."""

    compatibility: Literal["backward", "none"] = Field(
        "backward",
        description=(
            "`backward`: a new schema version must accept the previous version's `examples` "
            "and the last 1000 stored records. `none`: any valid draft-06 schema."
        ),
    )
    invalid_rows: Literal["reject", "quarantine"] = Field(
        "reject", description="What a file's invalid rows do (file uploads)."
    )
    trim_strings: bool = Field(
        True, strict=True, description="Trim surrounding whitespace of strings."
    )
    coerce_types: bool = Field(
        False,
        strict=True,
        description=(
            'Lossless coercion of JSON pushes to the schema\'s types ("42" → 42). '
            "Files always coerce."
        ),
    )
    drop_unknown_fields: bool = Field(
        False, strict=True, description="Drop members the schema does not name."
    )
    field_map: dict[str, str] = Field(
        default_factory=dict,
        description="Rename source members to schema fields: `{source: field}`.",
        examples=[{"e-mail": "customer-email"}],
    )
    subject_key: SubjectKey | None = Field(
        None,
        description="A JSON Pointer into the stored record to the member naming the person "
        "or customer a record is about (contract section 17): erasures and suppressions "
        "find records by it. Where a `hash` step writes that member, subjects are hashed "
        "the same way before they are compared. Absent: the dataset's records are not "
        "covered by erasures.",
        examples=["/customer-email"],
    )
    retention_days: int | None = Field(
        None,
        ge=1,
        le=3650,
        strict=True,
        description="Records ingested longer ago than this are removed (within 24 h), with "
        "their quarantined rows and raw files, and appear in the record feed as erased. "
        "Absent: kept for ever.",
        examples=[365],
    )

    def normalisation(self, *, coerce: bool | None = None) -> normalise.Options:
        """The normaliser's options. `coerce=True` is what files ask for (every CSV value
        is text): they always coerce, and an empty cell is an absent member."""
        return normalise.Options(
            trim_strings=self.trim_strings,
            coerce_types=self.coerce_types if coerce is None else coerce,
            drop_unknown_fields=self.drop_unknown_fields,
            field_map=dict(self.field_map),
            empty_cells_absent=coerce is True,
        )


class DatasetCreate(Input):
    dataset_id: DatasetId
    schema_: dict[str, Any] = Field(alias="schema", examples=[EXAMPLE_SCHEMA])
    options: DatasetOptions = Field(default_factory=DatasetOptions)


class SchemaUpdate(Input):
    schema_: dict[str, Any] = Field(alias="schema", examples=[EXAMPLE_SCHEMA])


class OptionsUpdate(Input):
    options: DatasetOptions


class _WithSchema(Output):
    """`schema` is a BaseModel attribute, so the field is `schema_` under the alias."""

    model_config = ConfigDict(from_attributes=True, validate_by_name=True, serialize_by_alias=True)


class SchemaVersionRead(_WithSchema):
    schema_version: int = Field(examples=[1])
    schema_: dict[str, Any] = Field(alias="schema", examples=[EXAMPLE_SCHEMA])
    author_id: uuid.UUID
    created_at: Timestamp


class VersionSummary(Output):
    schema_version: int = Field(examples=[1])
    created_at: Timestamp


class DatasetRead(_WithSchema):
    """A dataset: its current schema version and options."""

    client_id: str = Field(examples=["acme-crm"])
    dataset_id: str = Field(examples=["orders"])
    schema_version: int = Field(examples=[1])
    schema_: dict[str, Any] = Field(alias="schema", examples=[EXAMPLE_SCHEMA])
    options: DatasetOptions
    versions: list[VersionSummary]
    created_at: Timestamp
    updated_at: Timestamp


class DatasetQuery(PageQuery):
    client_id: ClientId | None = Field(
        None,
        description="Only this ingestion client's datasets (default: every client the "
        "token may use).",
    )


class ClientQuery(Input):
    client_id: ClientId


# --- push ---------------------------------------------------------------------------------


class PushIn(Input):
    """The push envelope. `data` is one record (an object) or a batch (an array of them)."""

    client_id: ClientId
    dataset_id: DatasetId
    data: dict[str, Any] | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)] = (
        Field(
            description="One record, or a batch of 1-1000 (`HEADWATER_MAX_BATCH_RECORDS`).",
            examples=[[{"order_id": "A-1", "amount": 12.5}]],
        )
    )


class PushResult(Output):
    transaction_id: uuid.UUID
    status: Literal["completed"] = "completed"
    client_id: str = Field(examples=["acme-crm"])
    dataset_id: str = Field(examples=["orders"])
    schema_version: int = Field(examples=[1])
    records_received: int = Field(examples=[1])
    records_accepted: int = Field(
        examples=[1],
        description="Records stored: fewer than received where the dataset's transform "
        "steps filtered or deduplicated some (the transaction counts them).",
    )
    received_at: Timestamp


class RecordError(Output):
    record: int = Field(description="Index of the record in `data` (0 for a single object).")
    path: str = Field(description="JSON Pointer into the record.", examples=["/amount"])
    keyword: str = Field(examples=["type"])
    message: str = Field(examples=['"12,5" is not of type "number"'])
    line: int | None = Field(None, description="Line of the file (file transactions).")


# --- transactions and records -------------------------------------------------------------


Channel = Literal["api", "upload", "sftp", "email"]


class TransactionRead(Output):
    transaction_id: uuid.UUID = Field(validation_alias="id")
    kind: Literal["json", "file"]
    channel: Channel = Field(
        description="The door it came through: `api` (push JSON), `upload` (presigned "
        "URL), `sftp` or `email`.",
        examples=["api"],
    )
    client_id: str
    dataset_id: str
    schema_version: int | None
    transform_version: int | None = Field(
        None,
        description="The dataset's transform version in force when the transaction began "
        "(applied to all of it); null where the dataset had none.",
        examples=[None],
    )
    status: TransactionStatus
    records_received: int
    records_processed: int | None = Field(
        None,
        description="Files: rows read so far. While `processing` it grows (written every "
        "2 s or so on PostgreSQL; SQLite, with one writer, shows it when the file is "
        "final); null before processing starts; once final, equal to `records_received`.",
        examples=[120000],
    )
    records_accepted: int = Field(description="Records stored.")
    records_rejected: int
    records_filtered: int = Field(
        0, description="Records a `filter` step kept out (not stored).", examples=[0]
    )
    records_duplicates: int = Field(
        0,
        description="Records a `dedupe` step found duplicates of a record stored within "
        "its window, or of an earlier one of the same push or file (not stored).",
        examples=[0],
    )
    records_suppressed: int = Field(
        0,
        description="Records of subjects an erasure suppressed (contract section 17): not stored.",
        examples=[0],
    )
    file_erased: bool = Field(
        False,
        description="Files: its raw file was removed (an erasure, or raw file retention, "
        "`HEADWATER_RAW_FILE_RETENTION_DAYS`); its counts stay.",
        examples=[False],
    )
    error_count: int
    errors: list[RecordError]
    file_name: str | None
    file_size: int | None
    content_type: str | None
    created_at: Timestamp
    uploaded_at: Timestamp | None = Field(
        None, description="Files: when the upload was complete and noticed."
    )
    started_at: Timestamp | None = Field(
        None, description="Files: when a worker last started processing the file."
    )
    completed_at: Timestamp | None
    resubmit_of: uuid.UUID | None = Field(
        None,
        description="A resubmission: the transaction whose quarantined rows it took "
        "(`POST /platform/v1/transactions/{id}/resubmit`).",
        examples=[None],
    )


class TransactionQuery(PageQuery):
    client_id: ClientId | None = None
    dataset_id: DatasetId | None = None
    status: TransactionStatus | None = None
    channel: Channel | None = Field(None, description="Only transactions of this channel.")
    created_after: InputDateTime | None = Field(None, description="Created at or after.")
    created_before: InputDateTime | None = Field(None, description="Created before.")


class RecordRead(Output):
    record_id: uuid.UUID
    transaction_id: uuid.UUID
    schema_version: int
    transform_version: int | None = Field(
        None,
        description="The transform version whose steps made `data` (null: the dataset had "
        "none when its transaction began).",
        examples=[None],
    )
    ingested_at: Timestamp
    data: dict[str, Any]


Scalar = str | int | float | bool
MAX_FILTER_FIELDS = 10


def _field_filter(value: object) -> object:
    if value is None or isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a JSON object")
    try:
        parsed = strictjson.loads(value.encode(), max_depth=1)
    except strictjson.StrictJSONError as exc:
        raise ValueError(f"is not acceptable JSON: {exc.message}") from None
    if not isinstance(parsed, dict) or not 1 <= len(parsed) <= MAX_FILTER_FIELDS:
        raise ValueError(f"must be a JSON object of 1-{MAX_FILTER_FIELDS} members")
    if any("\x00" in key or (isinstance(v, str) and "\x00" in v) for key, v in parsed.items()):
        raise ValueError("must not contain NUL (U+0000) characters")
    return parsed


FieldFilter = Annotated[dict[str, Scalar] | None, BeforeValidator(_field_filter)]


class RecordQuery(PageQuery):
    client_id: ClientId
    dataset_id: DatasetId
    transaction_id: uuid.UUID | None = None
    ingested_after: InputDateTime | None = Field(None, description="Ingested at or after.")
    ingested_before: InputDateTime | None = Field(None, description="Ingested before.")
    filter: FieldFilter = Field(
        None,
        description=(
            "Records whose top-level fields equal these values: a JSON object of 1-10 "
            "members, each a string, number or boolean. Names may hold any character, "
            "hyphens and underscores included."
        ),
        examples=['{"customer-email": "ann@example.com", "paid": true}'],
    )


class ChangesQuery(Input):
    client_id: ClientId
    dataset_id: DatasetId
    after: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        None, description="A `next_cursor`; absent: from the dataset's first record."
    )
    limit: Digits = Field(100, ge=1, le=1000, description="Records per page, 1-1000.")
    wait: float = Field(
        0,
        ge=0,
        le=30,
        allow_inf_nan=False,
        description="Seconds (0-30) an empty page waits for new records before it answers.",
        examples=[10],
    )


class ChangesPage(Output):
    data: list[RecordRead]
    next_cursor: str = Field(
        description="Pass as `after` for the next page; an empty page answers the cursor "
        "it was given. A cursor stays valid as long as the records after it exist.",
        examples=["cjE6NDI6MTAwNzpkM2I0YTFmMA"],
    )


# --- transforms (contract section 16) ---------------------------------------------------------

EXAMPLE_STEPS: list[dict[str, Any]] = [
    {"op": "hash", "path": "/customer/email", "lowercase": True},
    {"op": "mask", "path": "/card", "keep_last": 4},
    {"op": "rename", "from": "/amt", "to": "/amount"},
    {"op": "drop", "path": "/debug"},
    {"op": "filter", "path": "/test", "equals": True},
    {"op": "dedupe", "keys": ["/order_id"], "window_hours": 24},
]


class TransformsUpdate(Input):
    steps: list[Any] = Field(
        description="The steps, in order (at most 50): each an object with an `op` "
        "(`rename`, `drop`, `set`, `hash`, `mask`, `truncate`, `filter`, `dedupe`) and its "
        "members; paths are JSON Pointers. `[]` is a version with no steps.",
        examples=[EXAMPLE_STEPS],
    )


class TransformsRead(Output):
    version: int = Field(description="From 1; 0 before any steps were set.", examples=[1])
    steps: list[dict[str, Any]] = Field(examples=[EXAMPLE_STEPS])
    created_at: Timestamp | None = Field(
        description="Null for version 0.", examples=["2026-11-27T18:00:00.000Z"]
    )


class PreviewRequest(Input):
    records: list[Any] = Field(
        min_length=1,
        max_length=100,
        description="1 to 100 records, as a push would send them.",
        examples=[[{"order_id": "A-1", "amount": 12.5, "customer": {"email": "Ann@x.io"}}]],
    )
    steps: list[Any] | None = Field(
        None,
        description="Steps to try (checked as a PUT checks them); default: the current version's.",
        examples=[None],
    )


class PreviewRecords(Input):
    records: list[Any] = Field(
        min_length=1,
        max_length=100,
        description="1 to 100 records, as a push would send them.",
        examples=[[{"order_id": "A-1", "amount": 12.5, "customer": {"email": "Ann@x.io"}}]],
    )


PREVIEW_STORED: dict[str, Any] = {
    "outcome": "stored",
    "output": {"order_id": "A-1", "amount": 12.5, "customer": {"email": "9f86d0...e5c1"}},
    "errors": [],
}
PREVIEW_INVALID: dict[str, Any] = {
    "outcome": "invalid",
    "output": None,
    "errors": [{"path": "/amount", "keyword": "type", "message": "'x' is not of type 'number'"}],
}


class PreviewResult(Output):
    outcome: Literal["stored", "filtered", "duplicate", "suppressed", "invalid"] = Field(
        description="What a push of the record would do now (`suppressed`: its subject is "
        "suppressed by an erasure, contract section 17).",
        examples=["stored"],
    )
    output: dict[str, Any] | None = Field(
        description="The record as it would be stored (null unless `stored`).",
        examples=[PREVIEW_STORED["output"]],
    )
    errors: list[dict[str, Any]] = Field(
        description="Why the record is invalid: `{path, keyword, message}` as a push answers them.",
        examples=[PREVIEW_INVALID["errors"]],
    )


class PreviewRead(Output):
    results: list[PreviewResult] = Field(
        description="One a record, in the records' order.",
        examples=[[PREVIEW_STORED, PREVIEW_INVALID]],
    )
