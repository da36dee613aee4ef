"""Time: one source of "now", and the one way date-times are written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import PlainSerializer, WithJsonSchema


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso_ms(value: datetime) -> str:
    """UTC ISO 8601 with milliseconds and `Z`, the only date-time format the API answers."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Timestamp = Annotated[
    datetime,
    PlainSerializer(iso_ms, return_type=str, when_used="json"),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "examples": ["2026-11-22T09:30:00.000Z"]}
    ),
]
