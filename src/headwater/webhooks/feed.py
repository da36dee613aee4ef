"""The event feed (`GET /platform/v1/events`): a company's events in log order, after an
opaque cursor, every event exactly once (see `events.log` for why the order is the
order of commits and no event is ever passed)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from headwater.db import NUMBERING_WAIT, Database, unless_writer_busy
from headwater.errors import InvalidCursor
from headwater.events import log
from headwater.kit import cursors
from headwater.kit.coalesce import Coalescer
from headwater.webhooks import dispatch
from headwater.webhooks.errors import CursorExpired
from headwater.webhooks.rendering import render

_PREFIX = "p"


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


def number(db: Database, numbering: Coalescer, company_id: uuid.UUID) -> None:
    """Have the process's numbering give positions to the company's committed events,
    and wait for it (at most `NUMBERING_WAIT`; what is not numbered then comes later)."""

    def sequence() -> None:
        with unless_writer_busy():
            dispatch.sequence_all(db, company_id)

    numbering.ask(("events", company_id), sequence, timeout=NUMBERING_WAIT)


def page(
    db: Database,
    *,
    company_id: uuid.UUID,
    cursor: str | None,
    types: Sequence[str] | None,
    limit: int,
    numbering: Coalescer,
) -> dict[str, Any]:
    """`{"data", "next_cursor"}`. Events committed but not yet given a position are
    given one first (with their deliveries) by the process's numbering, off the request
    (`number`), so a reader sees its own writes at once and its request writes nothing.
    The page is read on the replica where one is set, once it shows every event
    numbered (`Database.caught_up`)."""
    position = decode(cursor)
    with db.read_connection() as connection:
        if position > log.head(connection, company_id):
            raise InvalidCursor(
                "`after` points past the end of the log; pass a `next_cursor` as it came."
            )
        waiting = log.pending(connection, company_id)
    if waiting:
        number(db, numbering, company_id)
    with db.caught_up(lambda c: log.head(c, company_id)) as connection:
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
    return {"data": data, "next_cursor": encode(rows[-1].pos if rows else position)}
