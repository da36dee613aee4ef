"""API models of the event feed, webhook endpoints, deliveries and replay."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, field_validator, model_validator

from headwater.events.outbox import TYPES
from headwater.exports.schemas import EXAMPLE as EXPORT_EXAMPLE
from headwater.kit.clock import InputDateTime, Timestamp
from headwater.kit.pagination import Digits, PageQuery
from headwater.kit.schemas import Input, Output
from headwater.subjects.schemas import EXAMPLE as ERASURE_EXAMPLE

EventTypeName = Literal[TYPES]  # type: ignore[valid-type]
Subscription = Literal[("*", *TYPES)]  # type: ignore[valid-type]
EndpointStatus = Literal["enabled", "disabled"]
DeliveryStatus = Literal["pending", "delivered", "failed"]

_TRANSACTION = {
    "transaction_id": "6f1c2a7e-9d0b-4f7e-8c55-1a2b3c4d5e6f",
    "kind": "json",
    "channel": "api",
    "client_id": "acme-crm",
    "dataset_id": "contacts",
    "schema_version": 1,
    "transform_version": None,
    "status": "completed",
    "records_received": 2,
    "records_processed": 2,
    "records_accepted": 2,
    "records_rejected": 0,
    "records_filtered": 0,
    "records_duplicates": 0,
    "records_suppressed": 0,
    "file_erased": False,
    "error_count": 0,
    "errors": [],
    "file_name": None,
    "file_size": None,
    "content_type": None,
    "created_at": "2026-11-24T09:30:00.000Z",
    "uploaded_at": None,
    "started_at": None,
    "completed_at": "2026-11-24T09:30:00.000Z",
    "resubmit_of": None,
}
_COMPANY = "0b7e5a52-3c1d-4e8f-9a6b-2d4c6e8f0a1b"


def _event(type_: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "3d9e2f10-5b7a-4c1e-8f2d-6a9b0c1d2e3f",
        "type": type_,
        "created_at": "2026-11-24T09:30:00.000Z",
        "company_id": _COMPANY,
        "data": data,
    }


# One example of each event's JSON, for the OpenAPI description.
# an export as its events carry it: never a download URL (read the export for one)
_EXPORT: dict[str, Any] = EXPORT_EXAMPLE | {"download_url": None, "expires_at": None}
EVENT_EXAMPLES: dict[str, dict[str, Any]] = {
    "transaction.completed": _event("transaction.completed", _TRANSACTION),
    "transaction.rejected": _event(
        "transaction.rejected",
        _TRANSACTION
        | {
            "status": "rejected",
            "records_accepted": 0,
            "records_rejected": 1,
            "error_count": 1,
            "errors": [
                {
                    "record": 1,
                    "path": "/email",
                    "keyword": "format",
                    "message": "'not-an-email' is not a 'email'",
                    "line": None,
                }
            ],
        },
    ),
    "transaction.failed": _event(
        "transaction.failed",
        _TRANSACTION
        | {
            "kind": "file",
            "channel": "upload",
            "status": "failed",
            "file_name": "contacts.csv",
            "content_type": "text/csv",
        },
    ),
    "transaction.expired": _event(
        "transaction.expired",
        _TRANSACTION
        | {
            "kind": "file",
            "channel": "upload",
            "status": "expired",
            "records_received": 0,
            "records_processed": 0,
            "records_accepted": 0,
            "file_name": "contacts.csv",
            "content_type": "text/csv",
        },
    ),
    "dataset.schema_version_added": _event(
        "dataset.schema_version_added",
        {"client_id": "acme-crm", "dataset_id": "contacts", "schema_version": 2},
    ),
    "workflow.status_changed": _event(
        "workflow.status_changed",
        {
            "id": "8a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "name": "Onboard Globex",
            "description": "Q4",
            "company_id": _COMPANY,
            "workflow_template_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
            "status": "active",
            "due_date": "2026-12-31T17:00:00.000Z",
            "notification_date": None,
            "created_at": "2026-11-24T09:00:00.000Z",
            "updated_at": "2026-11-24T09:30:00.000Z",
            "created_by": "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b",
            "updated_by": "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b",
            "previous_status": "draft",
        },
    ),
    "export.completed": _event("export.completed", _EXPORT),
    "export.failed": _event(
        "export.failed",
        _EXPORT
        | {
            "status": "failed",
            "record_count": None,
            "file_size": None,
            "available_until": None,
            "error": "the export failed 3 times",
        },
    ),
    "webhook_endpoint.disabled": _event(
        "webhook_endpoint.disabled",
        {
            "id": "7c8d9e0f-1a2b-4c3d-8e4f-5a6b7c8d9e0f",
            "url": "https://hooks.example.com/headwater",
            "event_types": ["*"],
            "description": "CRM sync",
            "status": "disabled",
            "created_at": "2026-11-19T09:00:00.000Z",
            "updated_at": "2026-11-24T09:30:00.000Z",
            "reason": "every attempt failed for 5 days",
        },
    ),
    "erasure.completed": _event("erasure.completed", ERASURE_EXAMPLE),
}


class EventRead(Output):
    """An event: `data` depends on `type` (contract section 13)."""

    id: uuid.UUID
    type: str = Field(examples=["transaction.completed"])
    created_at: Timestamp
    company_id: uuid.UUID
    data: dict[str, Any]

    model_config = Output.model_config | {
        "json_schema_extra": {"examples": list(EVENT_EXAMPLES.values())}
    }


class EventPage(Output):
    data: list[EventRead]
    next_cursor: str = Field(
        description="Pass as `after` to read on; the same cursor again when nothing new "
        "has committed.",
        examples=["cDo0Mg"],
    )


def _types(value: object) -> object:
    """`type=a,b`: one value or several, comma-separated (repeating works too)."""
    values = [value] if isinstance(value, str) else value
    if isinstance(values, list):
        return [part.strip() for item in values for part in str(item).split(",") if part.strip()]
    return value


class EventQuery(Input):
    after: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        None, description="A `next_cursor`; absent: from the oldest event kept."
    )
    type: Annotated[list[EventTypeName] | None, BeforeValidator(_types)] = Field(
        None,
        description="Only events of these types (one, or several comma-separated).",
        examples=["transaction.completed,transaction.rejected"],
    )
    limit: Digits = Field(100, ge=1, le=1000, description="Events per page, 1-1000.")


Url = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
Description = Annotated[str, StringConstraints(max_length=500)]


def _subscriptions(value: list[str]) -> list[str]:
    if "*" in value and len(value) > 1:
        raise ValueError('"*" stands alone: it subscribes to every type')
    if len(set(value)) != len(value):
        raise ValueError("each type at most once")
    return value


class EndpointCreate(Input):
    url: Url = Field(examples=["https://hooks.example.com/headwater"])
    event_types: list[Subscription] = Field(
        min_length=1,
        max_length=len(TYPES) + 1,
        description='The event types to deliver, or `["*"]` for every type.',
        examples=[["transaction.completed", "transaction.rejected"]],
    )
    description: Description = Field("", examples=["CRM sync"])

    _check_types = field_validator("event_types")(_subscriptions)


class EndpointUpdate(Input):
    model_config = Input.model_config | {"json_schema_extra": {"minProperties": 1}}

    url: Url | None = None
    event_types: list[Subscription] | None = Field(None, min_length=1, max_length=len(TYPES) + 1)
    description: Description | None = None
    status: EndpointStatus | None = Field(
        None,
        description=(
            "`disabled`: nothing is delivered until it is `enabled` again; its pending"
            " deliveries wait. `enabled` again: those among its newest 5,000 are due at"
            " once, older ones within seconds after the answer."
        ),
    )

    @field_validator("event_types")
    @classmethod
    def _check_types(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _subscriptions(value)

    @model_validator(mode="after")
    def _something(self) -> EndpointUpdate:
        if not self.model_fields_set:
            raise ValueError("name at least one of url, event_types, description, status")
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name} may not be null")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class EndpointRead(Output):
    id: uuid.UUID
    url: str = Field(examples=["https://hooks.example.com/headwater"])
    event_types: list[str] = Field(examples=[["transaction.completed"]])
    description: str = Field(examples=["CRM sync"])
    status: EndpointStatus
    created_at: Timestamp
    updated_at: Timestamp


class EndpointCreated(EndpointRead):
    secret: str = Field(
        description="Signs every delivery (Standard Webhooks). Shown only here and by "
        "rotate_secret: keep it.",
        examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )


class SecretRotated(Output):
    secret: str = Field(
        description="The new secret. For 24 h deliveries carry a signature with the old "
        "secret too.",
        examples=["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"],
    )


class AttemptRead(Output):
    at: Timestamp
    status_code: int | None = Field(description="The receiver's status; null if none came.")
    error: str | None = Field(examples=["timed out after 15 s"])
    duration_ms: int


class DeliveryRead(Output):
    event_id: uuid.UUID
    event_type: str = Field(examples=["transaction.completed"])
    status: DeliveryStatus
    attempts: list[AttemptRead]
    next_attempt_at: Timestamp | None = Field(
        description="When the next attempt may start (pending deliveries only)."
    )
    created_at: Timestamp


class DeliveryQuery(PageQuery):
    status: DeliveryStatus | None = None


class ReplayIn(Input):
    since: InputDateTime = Field(description="Events created at or after this time.")
    until: InputDateTime | None = Field(None, description="Events created before this time.")
    only_failed: bool = Field(
        False, strict=True, description="Only events whose delivery to this endpoint failed."
    )

    @model_validator(mode="after")
    def _window(self) -> ReplayIn:
        if self.until is not None and self.until <= self.since:
            raise ValueError("until must be later than since")
        return self


class ReplayQueued(Output):
    queued: int = Field(examples=[12])


class SentTest(Output):
    event_id: uuid.UUID = Field(
        description="The `webhook.test` event's id: its delivery's `webhook-id`.",
        examples=["0b7c6f9e-3d0a-4c55-9a51-2f1d5e8c7a10"],
    )
