"""The event log: each committed event's position, given after its commit, and what
retention removed.

Why positions are given after the commit: events are inserted by many writers at once
(API processes, file workers, the SFTP and SMTP servers), and a writer that inserted
first may commit last. A reader following an insertion number would pass the gap that
its event fills later and never see it. `sequence` instead numbers events that are
already committed, one sequencing at a time (the `event_log` row is locked): every
position it gives becomes visible at once, when its database transaction commits, and
any later position is given by a later sequencing, which starts only after that
commit. So a reader that sees position n sees every position below n, and a cursor
("after n") never skips an event. A long database transaction (a big file) delays only
its own events, not everyone's, as a snapshot-horizon cursor would.

Nothing here commits: the caller's unit of work does (the webhooks' fan-out shares the
sequencing's database transaction, so each event gets its deliveries exactly once).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    update,
)

from headwater.events.models import Event, EventHorizon, EventLog

# Numbers the oldest unsequenced events from the head on, in insertion order, in one
# statement (PostgreSQL and SQLite alike: window functions, UPDATE ... FROM). Nothing
# comes back: what a sequencing gave is read as the range of positions it covers.
_SEQUENCE = text(
    """
    UPDATE events SET pos = :head + todo.n
    FROM (
        SELECT seq, row_number() OVER (ORDER BY seq) AS n
        FROM events WHERE pos IS NULL ORDER BY seq LIMIT :limit
    ) AS todo
    WHERE events.seq = todo.seq
    """
)
SEQUENCE_BATCH = 5000


@dataclass(frozen=True, slots=True)
class Sequenced:
    """The positions one sequencing gave: `first` to `last`, both included."""

    first: int
    last: int

    def __len__(self) -> int:
        return self.last - self.first + 1

    def covers(self, pos: Any) -> ColumnElement[bool]:
        return and_(pos >= self.first, pos <= self.last)


def pending(connection: Connection) -> bool:
    """Whether any committed event waits for its position (a partial index answers)."""
    return bool(connection.scalar(select(exists().where(Event.pos.is_(None)))))


def sequence(connection: Connection, *, limit: int = SEQUENCE_BATCH) -> Sequenced | None:
    """Give the oldest committed events without a position (at most `limit`) the next
    positions, in insertion order; the range given, or None when none waited. Waits
    while another process sequences (the head row's lock)."""
    head = connection.execute(
        select(EventLog.pos).where(EventLog.id == 1).with_for_update()
    ).scalar_one()
    given = connection.execute(_SEQUENCE, {"head": head, "limit": limit}).rowcount
    if not given:
        return None
    connection.execute(update(EventLog).where(EventLog.id == 1).values(pos=head + given))
    return Sequenced(first=head + 1, last=head + given)


def summary(connection: Connection, sequenced: Sequenced) -> list[tuple[uuid.UUID, str, int]]:
    """How many events of each (company, type) a sequencing covered."""
    rows = connection.execute(
        select(Event.company_id, Event.type, func.count())
        .where(sequenced.covers(Event.pos))
        .group_by(Event.company_id, Event.type)
    )
    return [(company_id, type_, count) for company_id, type_, count in rows]


def head(connection: Connection) -> int:
    """The last position given."""
    return int(connection.execute(select(EventLog.pos).where(EventLog.id == 1)).scalar_one())


def after(
    connection: Connection,
    *,
    company_id: uuid.UUID,
    position: int,
    types: Sequence[str] | None,
    limit: int,
) -> list[Row[Any]]:
    """A company's events after `position`, in position order (at most `limit`)."""
    table = Event.__table__
    stmt = select(table).where(table.c.company_id == company_id, table.c.pos > position)
    if types:
        stmt = stmt.where(table.c.type.in_(list(types)))
    return list(connection.execute(stmt.order_by(table.c.pos).limit(limit)).all())


def horizon(connection: Connection, company_id: uuid.UUID) -> int:
    """The last position of the company's events that retention removed (0: none)."""
    found = connection.scalar(
        select(EventHorizon.deleted_through).where(EventHorizon.company_id == company_id)
    )
    return int(found or 0)


def purge(connection: Connection, *, older_than: datetime, batch: int = 1000) -> int:
    """Remove sequenced events created before `older_than`, oldest first (insertion
    order follows time closely, so the walk stops at the first younger one), and move
    each company's horizon past them. Their deliveries go with them (foreign key)."""
    rows = connection.execute(
        select(Event.seq, Event.pos, Event.company_id, Event.created_at)
        .order_by(Event.seq)
        .limit(batch)
    ).all()
    old = []
    for row in rows:
        if row.created_at >= older_than or row.pos is None:
            break
        old.append(row)
    if not old:
        return 0
    connection.execute(delete(Event).where(Event.seq <= old[-1].seq, Event.pos.is_not(None)))
    through: dict[uuid.UUID, int] = {}
    for row in old:
        through[row.company_id] = max(through.get(row.company_id, 0), row.pos)
    # the oldest go first, so a company's horizon only moves forward
    for company_id, pos in through.items():
        moved = connection.execute(
            update(EventHorizon)
            .where(EventHorizon.company_id == company_id)
            .values(deleted_through=pos)
        )
        if not moved.rowcount:
            connection.execute(
                insert(EventHorizon), [{"company_id": company_id, "deleted_through": pos}]
            )
    return len(old)
