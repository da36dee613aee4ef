"""Writing events: `event` makes one, `write` adds events to the caller's database
transaction. Nothing here commits: an event stands or falls with its change."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, insert

from headwater import wakeups
from headwater.events.models import Event
from headwater.kit.clock import iso_ms, utcnow_ms

EventType = Literal[
    "transaction.completed",
    "transaction.rejected",
    "transaction.failed",
    "transaction.expired",
    "dataset.schema_version_added",
    "workflow.status_changed",
    "export.completed",
    "export.failed",
    "webhook_endpoint.disabled",
    "erasure.completed",
]
TYPES: tuple[str, ...] = EventType.__args__  # type: ignore[attr-defined]

_INSERT = insert(Event)


def event(
    type: EventType,
    *,
    company_id: uuid.UUID,
    data: dict[str, Any] | None = None,
    transaction_id: uuid.UUID | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """An event's columns: its `data` (JSON as the API answers it: strings for ids and
    times), or the final transaction it reports on."""
    return _columns(type, company_id, data, transaction_id, created_at)


def _columns(
    type: str,
    company_id: uuid.UUID,
    data: dict[str, Any] | None,
    transaction_id: uuid.UUID | None,
    created_at: datetime | None,
) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "type": type,
        "company_id": company_id,
        "created_at": created_at or utcnow_ms(),
        "transaction_id": transaction_id,
        "data": data,
    }


# The place of an event kept off the log: before every position (they start at 1), so no
# feed, fan-out or replay ever takes it; its writer delivers it (a webhook test event).
OFF_THE_LOG = 0


def off_the_log(type: str, *, company_id: uuid.UUID, data: dict[str, Any]) -> dict[str, Any]:
    """An event's columns, for an event no feed shows and no endpoint subscribes to."""
    return _columns(type, company_id, data, None, None) | {"pos": OFF_THE_LOG}


def write(connection: Connection, events: Sequence[dict[str, Any]]) -> None:
    """Add events to the connection's database transaction (one executemany); once it
    commits, the workers are woken to deliver them."""
    if events:
        connection.execute(_INSERT, list(events))
        wakeups.mark(connection, "events")


def as_json(row: Any, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """An event row as the API and webhooks carry it; `data` for one whose data is
    elsewhere (a transaction's)."""
    return {
        "id": str(row.id),
        "type": row.type,
        "created_at": iso_ms(row.created_at),
        "company_id": str(row.company_id),
        "data": row.data if data is None else data,
    }
