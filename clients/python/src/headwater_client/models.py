"""Typed results: one frozen dataclass per resource the API answers.

Ids are strings, date-times are timezone-aware `datetime`s. Members the service adds
later are ignored here but kept in `raw`, the answer as it came, which is also what
`to_json()` gives back.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Self, TypeVar

FINAL_STATUSES = frozenset({"completed", "rejected", "failed", "expired"})


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType):  # X | None
        return _convert(next(a for a in args if a is not type(None)), value)
    if hint is datetime:
        return datetime.fromisoformat(value)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        return [_convert(args[0], item) for item in value]
    if isinstance(hint, type) and issubclass(hint, Resource):
        return hint.from_json(value)
    return value


@dataclass(frozen=True, slots=True)
class Resource:
    """Base of the typed results: built from the service's JSON, leniently."""

    raw: dict[str, Any] = field(repr=False, compare=False, kw_only=True)

    @classmethod
    def from_json(cls, data: dict[str, Any], **local: Any) -> Self:
        """Build from the service's JSON; `local` sets fields the JSON does not carry."""
        hints = _hints(cls)
        values = {
            f.name: _convert(hints[f.name], data.get(f.name))
            for f in dataclasses.fields(cls)
            if f.name != "raw" and f.name not in local
        }
        return cls(**values, **local, raw=data)

    def to_json(self) -> dict[str, Any]:
        """The resource as the service answered it."""
        return self.raw


@dataclass(frozen=True, slots=True)
class Token(Resource):
    access_token: str = field(repr=False)
    token_type: str
    expires_in: int
    scope: str


@dataclass(frozen=True, slots=True)
class WhoAmI(Resource):
    subject: str
    author_id: str
    company_id: str | None
    client_ids: list[str]
    scopes: list[str]


@dataclass(frozen=True, slots=True)
class Category(Resource):
    id: str
    company_id: str
    name: str
    description: str
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@dataclass(frozen=True, slots=True)
class TemplateStep(Resource):
    step_id: str
    name: str
    description: str
    type: str


@dataclass(frozen=True, slots=True)
class Template(Resource):
    id: str
    company_id: str
    category_id: str
    name: str
    description: str
    steps: list[TemplateStep]
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@dataclass(frozen=True, slots=True)
class Workflow(Resource):
    id: str
    name: str
    description: str
    company_id: str
    workflow_template_id: str
    status: str
    due_date: datetime
    notification_date: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str


@dataclass(frozen=True, slots=True)
class WorkflowTask(Resource):
    id: str
    company_id: str
    workflow_id: str
    step_id: str
    name: str
    description: str
    type: str
    created_at: datetime
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True, slots=True)
class ActivityEntry(Resource):
    id: str
    resource_type: str
    resource_id: str
    author_id: str
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class TransactionError(Resource):
    """One problem of a transaction; `line` is set for files."""

    record: int
    path: str
    keyword: str
    message: str
    line: int | None


@dataclass(frozen=True, slots=True)
class Transaction(Resource):
    transaction_id: str
    kind: str
    channel: str | None  # api, upload, sftp or email (None from an older service)
    client_id: str
    dataset_id: str
    schema_version: int | None
    status: str
    records_received: int
    records_accepted: int
    records_rejected: int
    error_count: int
    errors: list[TransactionError]
    file_name: str | None
    file_size: int | None
    content_type: str | None
    created_at: datetime
    uploaded_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    records_processed: int | None  # a file's rows read so far, while it is processing
    resubmit_of: str | None  # a resubmission: the transaction whose quarantined rows it took
    # what the dataset's transform steps did (None from an older service)
    transform_version: int | None
    records_filtered: int | None
    records_duplicates: int | None
    records_suppressed: int | None = None
    file_erased: bool | None = None

    @property
    def finished(self) -> bool:
        """Whether the status is final: completed, rejected, failed or expired."""
        return self.status in FINAL_STATUSES


@dataclass(frozen=True, slots=True)
class QuarantinedRow(Resource):
    """A row of a file that failed validation under the `quarantine` policy. A row that
    could not become a record has `data` None, and its text in `to_json()["raw"]`."""

    line: int
    record: int
    data: dict[str, Any] | None
    errors: list[dict[str, Any]]
    resolved_by: str | None  # the resubmission that stored it


@dataclass(frozen=True, slots=True)
class Record(Resource):
    record_id: str
    transaction_id: str
    schema_version: int
    ingested_at: datetime
    data: dict[str, Any]
    transform_version: int | None  # the steps that made `data` (None: none)


@dataclass(frozen=True, slots=True)
class Transforms(Resource):
    """A version of a dataset's transform steps (0, with none, before any were set)."""

    version: int
    steps: list[dict[str, Any]]
    created_at: datetime | None


@dataclass(frozen=True, slots=True)
class PreviewResult(Resource):
    outcome: str  # stored, filtered, duplicate or invalid
    output: dict[str, Any] | None  # the record as it would be stored
    errors: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Preview(Resource):
    results: list[PreviewResult]


@dataclass(frozen=True, slots=True)
class SchemaVersionSummary(Resource):
    schema_version: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Dataset(Resource):
    client_id: str
    dataset_id: str
    schema_version: int
    schema: dict[str, Any]
    options: dict[str, Any]
    versions: list[SchemaVersionSummary]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class UploadTicket(Resource):
    """Where and how to PUT a file (`GET /platform/v1/data/file_upload_url`)."""

    upload_url: str = field(repr=False)
    method: str
    headers: dict[str, str]
    transaction_id: str
    file_id: str
    expires_at: datetime
    expires_in: int


T = TypeVar("T", bound=Resource)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list (interface document 2.7); pages are numbered from 0."""

    page_number: int
    page_size: int
    total_entries: int
    total_pages: int
    data: list[T]

    @classmethod
    def parse(cls, item: type[T], body: dict[str, Any]) -> Page[T]:
        return cls(
            page_number=int(body["page_number"]),
            page_size=int(body["page_size"]),
            total_entries=int(body["total_entries"]),
            total_pages=int(body["total_pages"]),
            data=[item.from_json(entry) for entry in body["data"]],
        )

    @property
    def is_last(self) -> bool:
        return self.page_number + 1 >= self.total_pages or not self.data


@dataclass(frozen=True, slots=True)
class BatchResult(Resource):
    """One committed batch of a push: records `first_record` to `first_record + records - 1`
    of the caller's iterable. `replayed` is true when the service answered an earlier
    attempt's result again (the batch was stored once, by that attempt)."""

    transaction_id: str
    schema_version: int
    records_received: int
    records_accepted: int
    received_at: datetime
    first_record: int = field(default=0, kw_only=True)
    replayed: bool = field(default=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class PushResult:
    """Every batch of a push, in order."""

    batches: list[BatchResult]

    @property
    def transaction_ids(self) -> list[str]:
        return [batch.transaction_id for batch in self.batches]

    @property
    def records_accepted(self) -> int:
        return sum(batch.records_accepted for batch in self.batches)


@dataclass(frozen=True, slots=True)
class WebhookEndpoint(Resource):
    """A receiver of the company's events. `secret` only in the answer of a create."""

    id: str
    url: str
    event_types: list[str]
    description: str
    status: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class WebhookDelivery(Resource):
    """One event sent (or to be sent) to an endpoint, with its attempts (dicts: `at`,
    `status_code`, `error`, `duration_ms`)."""

    event_id: str
    event_type: str
    status: str
    attempts: list[dict[str, Any]]
    next_attempt_at: datetime | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Changes(Resource):
    """A page of a dataset's record feed: its records in commit order, and the cursor to
    save and pass as `after` to read on (also when `records` is empty)."""

    data: list[Record]
    next_cursor: str

    @property
    def records(self) -> list[Record]:
        return self.data


@dataclass(frozen=True, slots=True)
class Export(Resource):
    """A dataset written to a file (parquet, ndjson or csv) by the service's worker;
    `download_url` once `completed`, valid until `expires_at`."""

    export_id: str
    client_id: str
    dataset_id: str
    format: str
    status: str
    record_count: int | None = None
    file_size: int | None = None
    download_url: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None
    available_until: datetime | None = None
    error: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")


@dataclass(frozen=True, slots=True)
class ErasureCounts(Resource):
    records: int
    quarantined_rows: int
    files: int
    exports: int


@dataclass(frozen=True, slots=True)
class Erasure(Resource):
    """A request to erase data subjects everywhere (scope `data:erase`): `completed` once
    every copy inside the service is gone; `counts` says what went."""

    erasure_id: str
    status: str
    subject_count: int
    suppress: bool
    client_id: str | None = None
    dataset_id: str | None = None
    counts: ErasureCounts | None = None
    error: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")


@dataclass(frozen=True, slots=True)
class Suppression(Resource):
    """A subject whose later records are not stored (only its id: the subject itself is
    not kept)."""

    suppression_id: str
    erasure_id: str
    client_id: str | None = None
    dataset_id: str | None = None
    created_at: datetime | None = None
