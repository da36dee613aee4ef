"""The event log: each company's committed events in order, each event's place in it
given after its commit; and what retention removed.

Why places are given after the commit: events are inserted by many writers at once
(API processes, file workers, the SFTP and SMTP servers), and a writer that inserted
first may commit last. A reader following an insertion number would pass the gap that
its event fills later and never see it. `sequence` instead numbers a company's events
that are already committed, one sequencing of that company at a time (its
`event_heads` row is locked): every position it gives becomes visible at once, when its
database transaction commits, and any later position is given by a later sequencing,
which starts only after that commit. So a reader that sees position n of a company sees
every position below n, and a cursor ("after n") never skips an event. A long database
transaction (a big file) delays only its own events, not everyone's, as a
snapshot-horizon cursor would.

Positions are given when they are needed, and only then: by the webhook worker for a
company with an enabled endpoint, by the feed before it answers a company's reader, and
by retention. A company nobody follows pays for its events' insertion only.

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
    Exists,
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

from headwater.db import Numbering, locked_head
from headwater.events.models import Event, EventHead, EventHorizon

# Numbers a company's oldest unsequenced events from its head on, in insertion order.
# Nothing comes back: what a sequencing gave is read as the range of positions it covers.
_NUMBERING = Numbering(
    head_key=EventHead.company_id,
    table="events",
    id=("seq", "created_at"),
    position="pos",
    scope="company_id",
    unnumbered="pos IS NULL",
    order="seq",
    key_type=Event.company_id.type,
)
SEQUENCE_BATCH = 5000


@dataclass(frozen=True, slots=True)
class Sequenced:
    """The positions one sequencing gave a company: `first` to `last`, both included."""

    company_id: uuid.UUID
    first: int
    last: int

    def __len__(self) -> int:
        return self.last - self.first + 1

    def events(self) -> ColumnElement[bool]:
        """The condition that selects the events it covers (an index range)."""
        return and_(
            Event.company_id == self.company_id, Event.pos >= self.first, Event.pos <= self.last
        )


def waiting(company_id: Any) -> Exists:
    """The condition that the company (an id, or a column that names one) has committed
    events waiting for their positions: an index probe."""
    return exists().where(Event.company_id == company_id, Event.pos.is_(None))


def pending(connection: Connection, company_id: uuid.UUID) -> bool:
    """Whether any committed event of the company waits for its position."""
    return bool(connection.scalar(select(waiting(company_id))))


def _locked_head(connection: Connection, company_id: uuid.UUID) -> int:
    """The company's last position, its row locked until the caller's commit."""
    return locked_head(connection, EventHead.company_id, company_id)


def sequence(
    connection: Connection, company_id: uuid.UUID, *, limit: int = SEQUENCE_BATCH
) -> Sequenced | None:
    """Give the company's oldest committed events without a position (at most `limit`)
    the next positions, in insertion order; the range given, or None when none waited.
    Waits while another process sequences the same company (its head row's lock)."""
    head, given = _NUMBERING.give(connection, company_id, limit=limit)
    if not given:
        return None
    return Sequenced(company_id=company_id, first=head + 1, last=head + given)


def summary(connection: Connection, sequenced: Sequenced) -> list[tuple[str, int]]:
    """How many events of each type a sequencing covered."""
    rows = connection.execute(
        select(Event.type, func.count()).where(sequenced.events()).group_by(Event.type)
    )
    return [(type_, count) for type_, count in rows]


def head(connection: Connection, company_id: uuid.UUID) -> int:
    """The company's last position given (0: none yet)."""
    found = connection.scalar(select(EventHead.pos).where(EventHead.company_id == company_id))
    return int(found or 0)


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
    """Cursors before this position of the company's have lost events to retention."""
    found = connection.scalar(
        select(EventHorizon.deleted_through).where(EventHorizon.company_id == company_id)
    )
    return int(found or 0)


def purge(connection: Connection, *, older_than: datetime, batch: int = 1000) -> int:
    """Remove events created before `older_than`, oldest first (insertion order follows
    time closely, so the walk stops at the first younger one), and move each company's
    horizon past them: past the last position removed, and past the head when events
    that never had a position go (a cursor at the head then missed them too). Their
    deliveries go with them (foreign key)."""
    rows = connection.execute(
        select(Event.seq, Event.company_id, Event.created_at).order_by(Event.seq).limit(batch)
    ).all()
    old = []
    for row in rows:
        if row.created_at >= older_than:
            break
        old.append(row)
    if not old:
        return 0
    companies = sorted({row.company_id for row in old})
    through = old[-1].seq
    for company_id in companies:
        head = _locked_head(connection, company_id)
        removed = (
            connection.execute(
                delete(Event)
                .where(Event.company_id == company_id, Event.seq <= through)
                .returning(Event.pos)
            )
            .scalars()
            .all()
        )
        positions = [pos for pos in removed if pos is not None]
        mark = max(positions, default=0)
        if len(positions) < len(removed):
            mark = max(mark, head + 1)
        _move_horizon(connection, company_id, mark)
    return len(old)


def forget(connection: Connection, partition: str) -> int:
    """Before a partition of `events` (PostgreSQL, `webhooks.partitions`) is dropped
    whole: move each company's horizon past its events, as `purge` does for the rows it
    deletes; how many events it holds. `partition`: a name of ours, never input."""
    summary = text(
        "SELECT company_id, max(pos) AS last, count(*) AS events,"  # noqa: S608 (ours)
        " count(*) FILTER (WHERE pos IS NULL) AS unplaced"
        f" FROM {partition} GROUP BY company_id"
    )
    # the heads first, in one order, then the counts they hold still
    heads = {
        row.company_id: _locked_head(connection, row.company_id)
        for row in sorted(connection.execute(summary), key=lambda row: row.company_id)
    }
    rows = connection.execute(summary).all()
    for row in rows:
        head = heads.get(row.company_id)
        if head is None:  # its first event there came in between
            head = _locked_head(connection, row.company_id)
        mark = row.last or 0
        if row.unplaced:
            mark = max(mark, head + 1)
        _move_horizon(connection, row.company_id, mark)
    return sum(row.events for row in rows)


def _move_horizon(connection: Connection, company_id: uuid.UUID, mark: int) -> None:
    """Cursors of the company before `mark` have lost events to retention."""
    moved = connection.execute(
        update(EventHorizon)
        .where(EventHorizon.company_id == company_id, EventHorizon.deleted_through < mark)
        .values(deleted_through=mark)
    )
    if not moved.rowcount and not connection.scalar(
        select(exists().where(EventHorizon.company_id == company_id))
    ):
        connection.execute(
            insert(EventHorizon), [{"company_id": company_id, "deleted_through": mark}]
        )
