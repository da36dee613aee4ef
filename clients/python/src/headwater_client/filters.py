"""Helpers for activity-log filters (`POST /app/v1/activities/search`) and date-time
parameters.

    client.search_activities(
        resource_type=one_of("workflow", "workflow_task"),
        timestamp=time_range(since=datetime(2026, 11, 1, tzinfo=UTC)),
    )
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

Match = str | Iterable[str] | Mapping[str, Any]
"""A filter member: one value, several values (any of them: `$in`), or an operator object."""

DateTime = datetime | str


def iso(value: DateTime) -> str:
    """A date-time as the service takes it: UTC ISO 8601 with milliseconds and `Z`.

    Strings pass unchanged; a `datetime` must carry its time zone, because a naive one
    could mean any instant."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone; use an aware datetime")
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def one_of(*values: str) -> dict[str, list[str]]:
    """Any of these values: `{"$in": [...]}`."""
    return {"$in": list(values)}


def time_range(
    *,
    after: DateTime | None = None,
    since: DateTime | None = None,
    before: DateTime | None = None,
    until: DateTime | None = None,
) -> dict[str, str]:
    """A `timestamp` range: `after` ($gt) or `since` ($gte), `before` ($lt) or `until` ($lte)."""
    bounds = {"$gt": after, "$gte": since, "$lt": before, "$lte": until}
    chosen = {op: iso(value) for op, value in bounds.items() if value is not None}
    if not chosen:
        raise ValueError("time_range needs at least one bound")
    return chosen


def match(value: Match) -> Any:
    """A filter member as the service takes it: a string as is, an operator object as
    is, any other collection of strings as `$in`."""
    if isinstance(value, str | Mapping):
        return value
    return {"$in": list(value)}


def activity_filter(
    *,
    resource_type: Match | None = None,
    resource_id: Match | None = None,
    author_id: Match | None = None,
    action: Match | None = None,
    timestamp: Mapping[str, DateTime] | None = None,
) -> dict[str, Any]:
    """The `filter` object of an activity search, from keyword arguments."""
    members: dict[str, Any] = {
        name: match(value)
        for name, value in (
            ("resource_type", resource_type),
            ("resource_id", resource_id),
            ("author_id", author_id),
            ("action", action),
        )
        if value is not None
    }
    if timestamp is not None:
        members["timestamp"] = {op: iso(value) for op, value in timestamp.items()}
    return members
