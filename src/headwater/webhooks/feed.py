"""The event feed (`GET /platform/v1/events`): a company's events in log order, after an
opaque cursor, every event exactly once (see `events.log` for why the order is the
order of commits and no event is ever passed)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from headwater.db import Database
from headwater.errors import InvalidCursor
from headwater.events import log
from headwater.kit import cursors
from headwater.webhooks.errors import CursorExpired
from headwater.webhooks.rendering import render

_PREFIX = "p"
# How long a page waits for events committed just before it to be numbered, in steps
# (their writer numbers them at once; one that died leaves them to the worker's sweep)
PENDING_WAIT, PENDING_STEP = 1.0, 0.05


def encode(position: int) -> str:
    return cursors.pack(_PREFIX, position)


def decode(cursor: str | None) -> int:
    """The position a cursor names; 400 for anything that is not one of ours."""
    if cursor is None:
        return 0
    parts = cursors.unpack(cursor)
    position = cursors.number(parts[1]) if len(parts) == 2 and parts[0] == _PREFIX else None
    if position is None:
        raise InvalidCursor(
            "`after` is not a cursor this feed gave; pass a `next_cursor` as it came, or "
            "leave `after` out to read from the oldest event kept."
        )
    return position


def page(
    db: Database,
    *,
    company_id: uuid.UUID,
    cursor: str | None,
    types: Sequence[str] | None,
    limit: int,
) -> dict[str, Any]:
    """`{"data", "next_cursor"}`, and `pending`: events are committed but not yet given
    a position, which their writer gives them at once after its commit (`worker.
    number_forever`): the caller may wait for that. No reader writes."""
    position = decode(cursor)
    with db.read_connection() as connection:
        if position > log.head(connection, company_id):
            raise InvalidCursor(
                "`after` points past the end of the log; pass a `next_cursor` as it came."
            )
        waiting = log.pending(connection, company_id)
        rows = log.after(
            connection, company_id=company_id, position=position, types=types, limit=limit
        )
        # read after the rows: retention that removed events behind this cursor, while
        # they were read, shows here
        if cursor is not None and position < log.horizon(connection, company_id):
            raise CursorExpired(
                "Events after this cursor were removed (kept "
                "HEADWATER_EVENT_RETENTION_DAYS days); start again without `after`.",
            )
        data = render(connection, rows)
    next_cursor = encode(rows[-1].pos if rows else position)
    return {"data": data, "next_cursor": next_cursor, "pending": waiting and len(rows) < limit}
