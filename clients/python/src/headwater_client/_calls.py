"""Each API operation as a `Call`: what to send and how to read the answer. No I/O here;
the sync and the async client each send `Call`s with their own transport."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from headwater_client._batches import Batch
from headwater_client.filters import DateTime, Match, activity_filter, iso
from headwater_client.models import (
    ActivityEntry,
    BatchResult,
    Category,
    Changes,
    Dataset,
    Erasure,
    Export,
    Page,
    Preview,
    QuarantinedRow,
    Record,
    Resource,
    Suppression,
    Template,
    Token,
    Transaction,
    Transforms,
    UploadTicket,
    WebhookDelivery,
    WebhookEndpoint,
    WhoAmI,
    Workflow,
    WorkflowTask,
)

T = TypeVar("T")
R = TypeVar("R", bound=Resource)

NDJSON = "application/x-ndjson"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request. `path` is relative to the API's base URL unless it is absolute
    (the token endpoint on another host, a presigned upload URL). `content` is bytes, or
    a function giving a fresh body stream for each attempt."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: bool = True
    stream: bool = False
    label: str = ""

    def describe(self) -> str:
        # Never the full URL: a presigned URL's query string is its permission.
        return self.label or f"{self.method} {self.path}"


PageCall = Callable[[int], Call[Page[R]]]
"""The call for each page number of a list."""


def segment(value: str) -> str:
    """A path segment, quoted so that no id can reach another path."""
    return quote(str(value), safe="")


def query(**params: Any) -> dict[str, Any]:
    """Query parameters without the unset ones; date-times and objects in their wire form."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            value = iso(value)
        elif isinstance(value, Mapping):
            value = json.dumps(value, separators=(",", ":"))
        out[name] = value
    return out


def _json(response: httpx.Response) -> Any:
    return response.json()


def resource(method: str, path: str, model: type[R], **kwargs: Any) -> Call[R]:
    return Call(method, path, lambda r: model.from_json(_json(r)), **kwargs)


def pages(
    model: type[R],
    path: str,
    params: Mapping[str, Any] | None = None,
    *,
    body: Mapping[str, Any] | None = None,
) -> PageCall[R]:
    """The call for each page number of a list: a GET with `params`, or a POST of
    `body` (a search); the page number goes into whichever it is."""

    def parse(response: httpx.Response) -> Page[R]:
        return Page.parse(model, _json(response))

    def page(number: int) -> Call[Page[R]]:
        if body is not None:
            return Call("POST", path, parse, json={**body, "page": number})
        return Call("GET", path, parse, params={**(params or {}), "page": number})

    return page


def token(
    url: str, *, client_id: str, client_secret: str, audience: str, scope: str | None
) -> Call[Token]:
    body = {
        "grant_type": "client_credentials",
        "client_id": client_id,
        "client_secret": client_secret,
        "audience": audience,
    }
    if scope:
        body["scope"] = scope
    return resource(
        "POST", url.rstrip("/") + "/oauth/token", Token, json=body, auth=False, label="token"
    )


# The read operations: each client binds them as methods (`get_category = fetch(category)`),
# so their signatures and documentation live here, once.


def whoami() -> Call[WhoAmI]:
    """What the token grants: company, scopes, ingestion clients, author id."""
    return resource("GET", "/platform/v1/whoami", WhoAmI)


def category(category_id: str) -> Call[Category]:
    """One workflow category."""
    return resource("GET", f"/app/v1/workflow_categories/{segment(category_id)}", Category)


def categories(
    *,
    name: str | None = None,
    description: str | None = None,
    sort_by: str | None = None,
    sort_direction: str | None = None,
    page_size: int = 100,
) -> PageCall[Category]:
    """Workflow categories; `name` and `description` match case-insensitive parts;
    `sort_by` name, description, created_at (default) or updated_at."""
    params = query(
        name=name,
        description=description,
        sort_by=sort_by,
        sort_direction=sort_direction,
        page_size=page_size,
    )
    return pages(Category, "/app/v1/workflow_categories", params)


def template(template_id: str) -> Call[Template]:
    """One workflow template, with its steps."""
    return resource("GET", f"/app/v1/workflow_templates/{segment(template_id)}", Template)


def templates(*, category_id: str | None = None, page_size: int = 100) -> PageCall[Template]:
    """Workflow templates, of one category if given."""
    params = query(category_id=category_id, page_size=page_size)
    return pages(Template, "/app/v1/workflow_templates", params)


def workflows(
    *,
    status: str | list[str] | None = None,
    workflow_template_id: str | None = None,
    name: str | None = None,
    due_after: str | None = None,
    due_before: str | None = None,
    sort_by: str | None = None,
    sort_direction: str | None = None,
    page_size: int = 100,
) -> PageCall[Workflow]:
    """Workflows; `status` one or several; `name` matches a case-insensitive part;
    `due_after` inclusive, `due_before` exclusive; `sort_by` name, due_date, created_at
    (default), updated_at or status."""
    params = query(
        status=",".join(status) if isinstance(status, list) else status,
        workflow_template_id=workflow_template_id,
        name=name,
        due_after=due_after,
        due_before=due_before,
        sort_by=sort_by,
        sort_direction=sort_direction,
        page_size=page_size,
    )
    return pages(Workflow, "/app/v1/workflows", params)


def workflow(workflow_id: str) -> Call[Workflow]:
    """One workflow."""
    return resource("GET", f"/app/v1/workflows/{segment(workflow_id)}", Workflow)


def workflow_task(workflow_action_id: str) -> Call[WorkflowTask]:
    """One workflow task (workflow action)."""
    path = f"/app/v1/workflow_tasks/actions/{segment(workflow_action_id)}"
    return resource("GET", path, WorkflowTask)


def workflow_tasks(workflow_id: str, *, page_size: int = 100) -> PageCall[WorkflowTask]:
    """A workflow's tasks, in step order."""
    params = query(workflow_id=workflow_id, page_size=page_size)
    return pages(WorkflowTask, "/app/v1/workflow_tasks", params)


def activities(
    filter: Mapping[str, Any] | None = None,
    *,
    resource_type: Match | None = None,
    resource_id: Match | None = None,
    author_id: Match | None = None,
    action: Match | None = None,
    timestamp: Mapping[str, DateTime] | None = None,
    sort_by: str = "timestamp",
    sort_direction: str = "desc",
    page_size: int = 100,
) -> PageCall[ActivityEntry]:
    """Activity log entries of the caller's company. Each member matches one value or
    any of several (a list, or `one_of(...)`: `$in`); `timestamp` takes
    `time_range(...)`; `filter` gives a raw filter object to start from."""
    chosen = dict(filter or {}) | activity_filter(
        resource_type=resource_type,
        resource_id=resource_id,
        author_id=author_id,
        action=action,
        timestamp=timestamp,
    )
    body: dict[str, Any] = {
        "page_size": page_size,
        "sort_by": sort_by,
        "sort_direction": sort_direction,
    }
    if chosen:
        body["filter"] = chosen
    return pages(ActivityEntry, "/app/v1/activities/search", body=body)


def transaction(transaction_id: str, *, wait: float = 0) -> Call[Transaction]:
    """One transaction: a push batch or a file, with its status, counts and errors.
    `wait` (0-30 s): while it is pending, answer when its status changes, or then."""
    path = f"/platform/v1/transactions/{segment(transaction_id)}"
    if wait:
        return resource("GET", path, Transaction, params={"wait": f"{wait:g}"})
    return resource("GET", path, Transaction)


def quarantine(
    transaction_id: str, *, status: str = "open", page_size: int = 100
) -> PageCall[QuarantinedRow]:
    """A file transaction's quarantined rows, in file order; `status` open (not yet
    stored), resolved or all."""
    path = f"/platform/v1/transactions/{segment(transaction_id)}/quarantine"
    return pages(QuarantinedRow, path, query(status=status, page_size=page_size))


def resubmit(
    transaction_id: str, corrections: Mapping[int, Mapping[str, Any]] | None = None
) -> Call[Transaction]:
    """Resubmit a file transaction's open quarantined rows in a new transaction (its
    `resubmit_of` names this one): all of them against the current schema, or with
    `corrections` (data by line) only those rows, each with its corrected data."""
    path = f"/platform/v1/transactions/{segment(transaction_id)}/resubmit"
    if corrections is None:
        return resource("POST", path, Transaction)
    rows = [{"line": line, "data": dict(data)} for line, data in corrections.items()]
    return resource("POST", path, Transaction, json={"rows": rows})


def transactions(
    *,
    client_id: str | None = None,
    dataset_id: str | None = None,
    status: str | None = None,
    channel: str | None = None,
    created_after: DateTime | None = None,
    created_before: DateTime | None = None,
    page_size: int = 100,
) -> PageCall[Transaction]:
    """Transactions, newest first; `channel` api, upload, sftp or email;
    `created_after` inclusive, `created_before` exclusive."""
    params = query(
        client_id=client_id,
        dataset_id=dataset_id,
        status=status,
        channel=channel,
        created_after=created_after,
        created_before=created_before,
        page_size=page_size,
    )
    return pages(Transaction, "/platform/v1/transactions", params)


RecordFilter = Mapping[str, str | int | float | bool]


def records(
    client_id: str,
    dataset_id: str,
    *,
    transaction_id: str | None = None,
    ingested_after: DateTime | None = None,
    ingested_before: DateTime | None = None,
    filter: RecordFilter | None = None,
    page_size: int = 100,
) -> PageCall[Record]:
    """Stored records in storage order, page by page; `filter` holds top-level fields
    and the values they must equal. For many records, stream them instead."""
    params = query(
        client_id=client_id,
        dataset_id=dataset_id,
        transaction_id=transaction_id,
        ingested_after=ingested_after,
        ingested_before=ingested_before,
        filter=filter,
        page_size=page_size,
    )
    return pages(Record, "/platform/v1/data", params)


def record_stream(
    client_id: str,
    dataset_id: str,
    *,
    transaction_id: str | None = None,
    ingested_after: DateTime | None = None,
    ingested_before: DateTime | None = None,
    filter: RecordFilter | None = None,
) -> Call[httpx.Response]:
    """Every matching record, streamed as NDJSON with constant memory however many
    match; `filter` holds top-level fields and the values they must equal."""
    params = query(
        client_id=client_id,
        dataset_id=dataset_id,
        transaction_id=transaction_id,
        ingested_after=ingested_after,
        ingested_before=ingested_before,
        filter=filter,
    )
    return Call(
        "GET",
        "/platform/v1/data",
        lambda r: r,
        params=params,
        headers={"Accept": NDJSON},
        stream=True,
    )


def dataset(dataset_id: str, *, client_id: str) -> Call[Dataset]:
    """A dataset of an ingestion client: current schema, every version, options."""
    path = f"/platform/v1/datasets/{segment(dataset_id)}"
    return resource("GET", path, Dataset, params={"client_id": client_id})


def datasets(*, client_id: str | None = None, page_size: int = 100) -> PageCall[Dataset]:
    """Datasets the token may read, of one ingestion client if given."""
    return pages(Dataset, "/platform/v1/datasets", query(client_id=client_id, page_size=page_size))


def _transforms_path(client_id: str, dataset_id: str) -> str:
    return f"/admin/v1/clients/{segment(client_id)}/datasets/{segment(dataset_id)}/transforms"


def transforms(dataset_id: str, *, client_id: str) -> Call[Transforms]:
    """The dataset's current transform steps (operator token, scope `admin`)."""
    return resource("GET", _transforms_path(client_id, dataset_id), Transforms)


def transform_version(dataset_id: str, version: int, *, client_id: str) -> Call[Transforms]:
    """One version of the dataset's transform steps (scope `admin`)."""
    path = f"{_transforms_path(client_id, dataset_id)}/versions/{int(version)}"
    return resource("GET", path, Transforms)


def set_transforms(
    dataset_id: str, steps: list[dict[str, Any]], *, client_id: str
) -> Call[Transforms]:
    """Store the steps as the dataset's next transform version (scope `admin`)."""
    path = _transforms_path(client_id, dataset_id)
    return resource("PUT", path, Transforms, json={"steps": steps})


def preview_transforms(
    dataset_id: str,
    records: list[dict[str, Any]],
    *,
    client_id: str,
    steps: list[dict[str, Any]] | None = None,
) -> Call[Preview]:
    """How 1-100 records would fare if pushed now, through the current steps or
    `steps`; nothing is stored (scope `admin`)."""
    body: dict[str, Any] = {"records": records}
    if steps is not None:
        body["steps"] = steps
    return resource(
        "POST", f"{_transforms_path(client_id, dataset_id)}/preview", Preview, json=body
    )


def push(batch: Batch, *, key: str) -> Call[BatchResult]:
    def parse(response: httpx.Response) -> BatchResult:
        replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
        return BatchResult.from_json(
            _json(response), first_record=batch.first_record, replayed=replayed
        )

    return Call(
        "POST",
        "/platform/v1/data/json",
        parse,
        content=batch.body,
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )


def upload_ticket(
    *, client_id: str, dataset_id: str, file_name: str, content_type: str
) -> Call[UploadTicket]:
    params = query(
        client_id=client_id, dataset_id=dataset_id, file_name=file_name, content_type=content_type
    )
    return resource("GET", "/platform/v1/data/file_upload_url", UploadTicket, params=params)


def put_file(ticket: UploadTicket, *, size: int, content: Callable[[], Any]) -> Call[None]:
    """The PUT to a presigned URL: its own headers, no bearer token (the URL is the
    permission), the length declared so that stores refuse an oversized file at once."""
    headers = {**ticket.headers, "Content-Length": str(size)}
    return Call(
        ticket.method,
        ticket.upload_url,
        lambda r: None,
        content=content,
        headers=headers,
        auth=False,
        label=f"{ticket.method} upload URL of transaction {ticket.transaction_id}",
    )


# Webhook endpoints (scope webhooks:manage)

ENDPOINTS = "/platform/v1/webhook_endpoints"


def create_webhook_endpoint(
    url: str, event_types: list[str], *, description: str = ""
) -> Call[WebhookEndpoint]:
    """A new endpoint; its `secret` is in this answer only (and in rotations')."""
    body = {"url": url, "event_types": event_types, "description": description}
    return resource("POST", ENDPOINTS, WebhookEndpoint, json=body)


def webhook_endpoint(endpoint_id: str) -> Call[WebhookEndpoint]:
    """One endpoint (never its secret)."""
    return resource("GET", f"{ENDPOINTS}/{segment(endpoint_id)}", WebhookEndpoint)


def webhook_endpoints(*, page_size: int = 100) -> PageCall[WebhookEndpoint]:
    """The company's endpoints, oldest first."""
    return pages(WebhookEndpoint, ENDPOINTS, query(page_size=page_size))


def update_webhook_endpoint(endpoint_id: str, **changes: Any) -> Call[WebhookEndpoint]:
    """Change `url`, `event_types`, `description` or `status` (enabled, disabled)."""
    body = {name: value for name, value in changes.items() if value is not None}
    return resource("PATCH", f"{ENDPOINTS}/{segment(endpoint_id)}", WebhookEndpoint, json=body)


def delete_webhook_endpoint(endpoint_id: str) -> Call[None]:
    """Delete an endpoint and its deliveries."""
    return Call("DELETE", f"{ENDPOINTS}/{segment(endpoint_id)}", lambda _response: None)


def rotate_webhook_secret(endpoint_id: str) -> Call[str]:
    """A new secret (the old one still signs, beside it, for 24 h)."""
    return Call(
        "POST",
        f"{ENDPOINTS}/{segment(endpoint_id)}/rotate_secret",
        lambda response: str(_json(response)["secret"]),
    )


def webhook_deliveries(
    endpoint_id: str, *, status: str | None = None, page_size: int = 100
) -> PageCall[WebhookDelivery]:
    """An endpoint's deliveries, newest first; `status` pending, delivered or failed."""
    params = query(status=status, page_size=page_size)
    return pages(WebhookDelivery, f"{ENDPOINTS}/{segment(endpoint_id)}/deliveries", params)


def replay_webhooks(
    endpoint_id: str,
    *,
    since: DateTime,
    until: DateTime | None = None,
    only_failed: bool = False,
) -> Call[int]:
    """Deliver again the window's events (all, or only those whose delivery failed);
    how many were queued."""
    body: dict[str, Any] = {"since": iso(since), "only_failed": only_failed}
    if until is not None:
        body["until"] = iso(until)
    return Call(
        "POST",
        f"{ENDPOINTS}/{segment(endpoint_id)}/replay",
        lambda response: int(_json(response)["queued"]),
        json=body,
    )


def test_webhook(endpoint_id: str) -> Call[str]:
    """Send the endpoint alone a `webhook.test` event; the event's id (its delivery's
    `webhook-id`)."""
    return Call(
        "POST",
        f"{ENDPOINTS}/{segment(endpoint_id)}/test",
        lambda response: str(_json(response)["event_id"]),
    )


def changes(
    client_id: str,
    dataset_id: str,
    *,
    after: str | None = None,
    limit: int = 1000,
    wait: float = 0,
) -> Call[Changes]:
    """A page of the dataset's record feed after the cursor `after` (None: from the
    first record); an empty page waits up to `wait` seconds (0-30) for new records."""
    params = query(client_id=client_id, dataset_id=dataset_id, after=after, limit=limit)
    if wait:
        params["wait"] = f"{wait:g}"
    return resource("GET", "/platform/v1/data/changes", Changes, params=params)


EXPORTS = "/platform/v1/exports"


def create_export(
    client_id: str,
    dataset_id: str,
    format: str = "parquet",
    *,
    ingested_after: DateTime | None = None,
    ingested_before: DateTime | None = None,
) -> Call[Export]:
    """Queue an export of the dataset (all records, or those ingested in the bounds)."""
    body: dict[str, Any] = {"client_id": client_id, "dataset_id": dataset_id, "format": format}
    if ingested_after is not None:
        body["ingested_after"] = iso(ingested_after)
    if ingested_before is not None:
        body["ingested_before"] = iso(ingested_before)
    return resource("POST", EXPORTS, Export, json=body)


def export(export_id: str) -> Call[Export]:
    """One export; once completed, with a freshly signed `download_url`."""
    return resource("GET", f"{EXPORTS}/{segment(export_id)}", Export)


def exports(
    *,
    client_id: str | None = None,
    dataset_id: str | None = None,
    status: str | None = None,
    page_size: int = 100,
) -> PageCall[Export]:
    """The company's exports, newest first; `status` queued, running, completed or failed."""
    params = query(client_id=client_id, dataset_id=dataset_id, status=status, page_size=page_size)
    return pages(Export, EXPORTS, params)


# --- data subjects (scope `data:erase`) ----------------------------------------------------

ERASURES = "/platform/v1/erasures"
SUPPRESSIONS = "/platform/v1/suppressions"


def create_erasure(
    subjects: list[str],
    *,
    client_id: str | None = None,
    dataset_id: str | None = None,
    suppress: bool = False,
) -> Call[Erasure]:
    """Queue an erasure of 1-1000 subjects (every client the token may use, or one
    client, or one dataset of it); `suppress` refuses their later records too."""
    body: dict[str, Any] = {"subjects": list(subjects), "suppress": suppress}
    if client_id is not None:
        body["client_id"] = client_id
    if dataset_id is not None:
        body["dataset_id"] = dataset_id
    return resource("POST", ERASURES, Erasure, json=body)


def erasure(erasure_id: str) -> Call[Erasure]:
    """One erasure, with what it removed so far."""
    return resource("GET", f"{ERASURES}/{segment(erasure_id)}", Erasure)


def erasures(*, status: str | None = None, page_size: int = 100) -> PageCall[Erasure]:
    """The company's erasures, newest first."""
    return pages(Erasure, ERASURES, query(status=status, page_size=page_size))


def suppressions(*, page_size: int = 100) -> PageCall[Suppression]:
    """The company's suppressions, newest first."""
    return pages(Suppression, SUPPRESSIONS, query(page_size=page_size))


def lift_suppression(suppression_id: str) -> Call[None]:
    """Lift a suppression: the subject's records are stored again."""
    return Call("DELETE", f"{SUPPRESSIONS}/{segment(suppression_id)}", lambda _response: None)
