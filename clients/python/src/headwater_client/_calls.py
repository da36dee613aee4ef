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
from headwater_client.filters import iso
from headwater_client.models import (
    ActivityEntry,
    BatchResult,
    Category,
    Dataset,
    Page,
    Record,
    Resource,
    Template,
    Token,
    Transaction,
    UploadTicket,
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


def page(model: type[R], path: str, params: Mapping[str, Any]) -> Call[Page[R]]:
    return Call("GET", path, lambda r: Page.parse(model, _json(r)), params=params)


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


def whoami() -> Call[WhoAmI]:
    return resource("GET", "/platform/v1/whoami", WhoAmI)


def category(category_id: str) -> Call[Category]:
    return resource("GET", f"/app/v1/workflow_categories/{segment(category_id)}", Category)


def categories(number: int, params: Mapping[str, Any]) -> Call[Page[Category]]:
    return page(Category, "/app/v1/workflow_categories", {**params, "page": number})


def template(template_id: str) -> Call[Template]:
    return resource("GET", f"/app/v1/workflow_templates/{segment(template_id)}", Template)


def templates(number: int, params: Mapping[str, Any]) -> Call[Page[Template]]:
    return page(Template, "/app/v1/workflow_templates", {**params, "page": number})


def workflow(workflow_id: str) -> Call[Workflow]:
    return resource("GET", f"/app/v1/workflows/{segment(workflow_id)}", Workflow)


def workflow_task(task_id: str) -> Call[WorkflowTask]:
    return resource("GET", f"/app/v1/workflow_tasks/actions/{segment(task_id)}", WorkflowTask)


def workflow_tasks(number: int, params: Mapping[str, Any]) -> Call[Page[WorkflowTask]]:
    return page(WorkflowTask, "/app/v1/workflow_tasks", {**params, "page": number})


def activities(number: int, body: Mapping[str, Any]) -> Call[Page[ActivityEntry]]:
    return Call(
        "POST",
        "/app/v1/activities/search",
        lambda r: Page.parse(ActivityEntry, _json(r)),
        json={**body, "page": number},
    )


def transaction(transaction_id: str) -> Call[Transaction]:
    return resource("GET", f"/platform/v1/transactions/{segment(transaction_id)}", Transaction)


def transactions(number: int, params: Mapping[str, Any]) -> Call[Page[Transaction]]:
    return page(Transaction, "/platform/v1/transactions", {**params, "page": number})


def records(number: int, params: Mapping[str, Any]) -> Call[Page[Record]]:
    return page(Record, "/platform/v1/data", {**params, "page": number})


def record_stream(params: Mapping[str, Any]) -> Call[httpx.Response]:
    """The records as NDJSON; the caller reads and closes the open response."""
    return Call(
        "GET",
        "/platform/v1/data",
        lambda r: r,
        params=params,
        headers={"Accept": NDJSON},
        stream=True,
    )


def dataset(dataset_id: str, client_id: str) -> Call[Dataset]:
    path = f"/platform/v1/datasets/{segment(dataset_id)}"
    return resource("GET", path, Dataset, params={"client_id": client_id})


def datasets(number: int, params: Mapping[str, Any]) -> Call[Page[Dataset]]:
    return page(Dataset, "/platform/v1/datasets", {**params, "page": number})


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
