"""Time: one source of "now", and the one way date-times are written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso_ms(value: datetime) -> str:
    """UTC ISO 8601 with milliseconds and `Z`, the only date-time format the API answers."""
    if value.tzinfo is not UTC:  # the database layer hands back UTC already: skip the work
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"


Timestamp = Annotated[
    datetime,
    PlainSerializer(iso_ms, return_type=str, when_used="json"),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "examples": ["2026-11-22T09:30:00.000Z"]}
    ),
]


def utcnow_ms() -> datetime:
    """Now, truncated to the millisecond: what the API can show is what is stored."""
    now = utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _parse_aware(value: object) -> object:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                "must be an ISO 8601 date-time, like 2026-11-22T09:30:00.000Z"
            ) from None
    else:
        raise ValueError("must be an ISO 8601 date-time string")
    if parsed.tzinfo is None:
        raise ValueError("must carry a time zone (Z or +hh:mm)")
    return parsed.astimezone(UTC)


InputDateTime = Annotated[
    datetime,
    BeforeValidator(_parse_aware),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "examples": ["2026-12-01T17:00:00.000Z"]}
    ),
]
