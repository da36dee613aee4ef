"""Activity use cases. `record` flushes and never commits: it joins its caller's transaction."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Row, Select, Table, Uuid, bindparam, select
from sqlalchemy.orm import Session

from headwater.activity import chain
from headwater.activity.models import ActivityEntry, ActivityHead
from headwater.activity.schemas import ActivitySearch
from headwater.db import Database, dialect_insert, pg_text
from headwater.kit.actor import Actor
from headwater.kit.cache import LRU
from headwater.kit.clock import iso_ms, utcnow_ms
from headwater.kit.pagination import PageStatements, page_json, shaped_statements


def chain_fields(entry: ActivityEntry) -> dict[str, Any]:
    """What the chain hash covers: everything the API shows, the id and the company."""
    return {
        "id": str(entry.id),
        "company_id": str(entry.company_id),
        "resource_type": entry.resource_type,
        "resource_id": str(entry.resource_id),
        "author_id": str(entry.author_id),
        "action": entry.action,
        "before": entry.before,
        "after": entry.after,
        "timestamp": iso_ms(entry.timestamp),
    }


def _locked_head(session: Session, company_id: uuid.UUID) -> ActivityHead:
    """The company's chain head, created if new, locked until the transaction ends.

    The row lock orders one company's writes; other companies' heads are other rows,
    so their writes never wait on these.
    """
    session.execute(
        dialect_insert(session.get_bind().dialect)(ActivityHead)
        .values(company_id=company_id, count=0, hash=chain.GENESIS)
        .on_conflict_do_nothing(index_elements=["company_id"])
    )
    return session.scalars(
        select(ActivityHead)
        .where(ActivityHead.company_id == company_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()


def record(
    session: Session,
    *,
    actor: Actor,
    action: str,
    resource_type: str,
    resource_id: uuid.UUID,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> ActivityEntry:
    """Append one entry to the actor's company chain, in the caller's transaction."""
    head = _locked_head(session, actor.company_id)
    entry = ActivityEntry(
        id=uuid.uuid4(),
        company_id=actor.company_id,
        seq=head.count + 1,
        resource_type=resource_type,
        resource_id=resource_id,
        author_id=actor.author_id,
        action=action,
        before=before,
        after=after,
        timestamp=utcnow_ms(),
        prev_hash=head.hash,
    )
    entry.hash = chain.link(head.hash, chain_fields(entry))
    head.count, head.hash = entry.seq, entry.hash
    session.add(entry)
    session.flush()
    return entry


_MATCHED = ("resource_type", "resource_id", "author_id", "action")

# Totals of filtered searches, keyed by the company's log position: any new entry moves
# the position, so a cached total is never stale.
_totals: LRU[int] = LRU(maxsize=4096)


def log_position(session: Session, company_id: uuid.UUID) -> int:
    """How many entries the company's log holds. Every audited change moves it forward, so
    it versions everything of the company that is written through the services."""
    count = session.connection().scalar(_POSITION, {"company_id": company_id})
    return count or 0


_POSITION = select(ActivityHead.count).where(
    ActivityHead.company_id == bindparam("company_id", type_=Uuid())
)


def with_log_position(page: Select[Any]) -> Select[Any]:
    """`page` (with `company_id` bound) and the company's log position as its last column.

    Hot lists cache their totals by the position; read with the page, it costs no round
    trip of its own. See `page_and_position`.
    """
    return page.add_columns(_POSITION.scalar_subquery().label("log_position"))


def page_and_position(
    session: Session, statements: PageStatements, company_id: uuid.UUID
) -> tuple[Sequence[Row[Any]], int]:
    """The rows of a page built `with_log_position`, and that position."""
    rows = session.connection().execute(statements.page, statements.params).all()
    position = rows[0][-1] if rows else log_position(session, company_id)
    return rows, position or 0


_SHOWN = (
    "id",
    "resource_type",
    "resource_id",
    "author_id",
    "action",
    "before",
    "after",
    "timestamp",
)
_BOUNDS = {"gt": "__gt__", "gte": "__ge__", "lt": "__lt__", "lte": "__le__"}


@functools.cache  # a bounded set of shapes: 2^4 matches x 2^4 bounds x sorts x directions
def _build(
    matched: tuple[tuple[str, bool], ...], bounds: tuple[str, ...], sort_by: str, desc: bool
) -> tuple[Select[Any], Select[Any]]:
    # typed parameters: the statements are also compiled with their values for EXPLAIN
    where = [ActivityEntry.company_id == bindparam("company_id", type_=Uuid())]
    for name, many in matched:
        column = getattr(ActivityEntry, name)
        where.append(
            column.in_(bindparam(name, expanding=True, type_=column.type))
            if many
            else column == bindparam(name, type_=column.type)
        )
    ts = ActivityEntry.timestamp
    for bound in bounds:
        where.append(getattr(ts, _BOUNDS[bound])(bindparam("ts_" + bound, type_=ts.type)))
    columns = [getattr(ActivityEntry, sort_by)]
    if sort_by != "timestamp":
        columns.append(ActivityEntry.timestamp)
    columns.append(ActivityEntry.seq)
    order = [c.desc() if desc else c.asc() for c in columns]
    # A deferred join: the page's places are found in an index alone (every filter's index
    # holds the company, its members, timestamp and seq), and only the page's own rows are
    # read from the table. Selecting the entries themselves read every skipped row too:
    # page 500 read 10,000 rows of the table for its 20 (issue 24).
    keys, count = shaped_statements([ActivityEntry.seq], where, order, ActivityEntry.id)
    places = keys.subquery("places")
    page = (
        select(*(getattr(ActivityEntry, name) for name in _SHOWN))
        .join(
            places,
            (ActivityEntry.company_id == bindparam("company_id", type_=Uuid()))
            & (ActivityEntry.seq == places.c.seq),
        )
        .order_by(*order)
    )
    return with_log_position(page), count


def _shape(company_id: uuid.UUID, query: ActivitySearch) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The search's shape (`_build`'s arguments: which members, bounds and sort) and its
    parameters."""
    params: dict[str, Any] = {
        "company_id": company_id,
        "offset": query.page * query.page_size,
        "limit": query.page_size,
    }
    matched: list[tuple[str, bool]] = []
    bounds: list[str] = []
    f = query.filter
    if f is not None:
        for name in _MATCHED:
            values = getattr(f, name)
            if values:
                matched.append((name, len(values) > 1))
                params[name] = list(values) if len(values) > 1 else values[0]
        if f.timestamp is not None:
            for bound in _BOUNDS:
                value = getattr(f.timestamp, bound)
                if value is not None:
                    bounds.append(bound)
                    params["ts_" + bound] = value
    shape = (tuple(matched), tuple(bounds), query.sort_by, query.sort_direction == "desc")
    return shape, params


def search_statements(*, company_id: uuid.UUID, query: ActivitySearch) -> PageStatements:
    """The page and count statements of a search; no filter reaches past the company."""
    shape, params = _shape(company_id, query)
    page, count = _build(*shape)
    return PageStatements(page=page, count=count, params=params)


def _total_key(company_id: uuid.UUID, position: int, query: ActivitySearch) -> Any:
    """The filtered total's key in `_totals`; None for an unfiltered search, whose total
    is the log position itself (the chain's length: nothing to count)."""
    if query.filter is None or not query.filter.model_fields_set:
        return None
    return (company_id, position, query.filter.model_dump_json())


def search(session: Session, *, company_id: uuid.UUID, query: ActivitySearch) -> bytes:
    """One page of the company's matching entries and their total, as the JSON answer.

    The hot read path: rows go straight to JSON, with no ORM objects or model validation
    for data the database already typed.
    """
    statements = search_statements(company_id=company_id, query=query)
    rows, position = page_and_position(session, statements, company_id)
    key = _total_key(company_id, position, query)
    total = (
        position
        if key is None
        else _totals.get_or_compute(
            key, lambda: session.connection().scalar(statements.count, statements.params) or 0
        )
    )
    return page_json(
        page=query.page, page_size=query.page_size, total=total, fields=_SHOWN, rows=rows
    )


# Filters whose members have an index of their own that ends in the sort order: the
# company, exactly those members, then (timestamp, seq) (`models.ActivityEntry`). A page
# of one, sorted by timestamp, is a range of that index whatever the values, so its plan
# is made once for any values (`Database.loop_read`'s `generic`). Planning each run was
# most of PostgreSQL's work a page: 300-400 µs of CPU against 110-150 µs with the plan
# made once (issue 24). Other filters (a resource type alone, an author and an action)
# are planned for their values.
_OWN_INDEX = frozenset(
    frozenset(columns[1:-2])
    for columns in (
        [c.name for c in index.columns] for index in cast(Table, ActivityEntry.__table__).indexes
    )
    if columns[0] == "company_id" and columns[-2:] == ["timestamp", "seq"]
)


def _plan_once(shape: tuple[Any, ...]) -> bool:
    """Whether a shape's best plan is the same for any values (see `_OWN_INDEX`)."""
    matched, _bounds, sort_by, _desc = shape
    return sort_by == "timestamp" and frozenset(name for name, _ in matched) in _OWN_INDEX


@functools.cache
def _as_text(shape: tuple[Any, ...]) -> tuple[str, str]:
    """A shape's page and count statements as text for psycopg (PostgreSQL)."""
    page, count = _build(*shape)
    return pg_text(page), pg_text(count)


_POSITION_TEXT = pg_text(_POSITION)


async def search_async(db: Database, *, company_id: uuid.UUID, query: ActivitySearch) -> bytes:
    """`search` for the API: on the event loop where the database allows it (PostgreSQL,
    and a filter without `$in`, whose lists the text statements do not take), else in a
    read session on a thread. Both answer the same bytes."""
    shape, params = _shape(company_id, query)
    if not db.reads_on_loop or any(many for _, many in shape[0]):
        return await db.read_on_thread(
            lambda session: search(session, company_id=company_id, query=query), replica=True
        )
    rows, total = await page_on_loop(
        db,
        _as_text(shape),
        params,
        totals=_totals,
        key=lambda position: _total_key(company_id, position, query),
        generic=_plan_once(shape),
        replica=True,
    )
    return page_json(
        page=query.page, page_size=query.page_size, total=total, fields=_SHOWN, rows=rows
    )


async def page_on_loop(
    db: Database,
    statements: tuple[str, str],
    params: dict[str, Any],
    *,
    totals: LRU[int],
    key: Callable[[int], Hashable | None],
    generic: bool = False,
    replica: bool = False,
) -> tuple[list[Any], int]:
    """A page built `with_log_position` (text: its page and count statements) on the
    event loop: its rows and its total. `key(position)` is the total's key in `totals`,
    or None where the total is the position itself. `generic`: the statements' best
    plans do not depend on their values (`Database.loop_read`); `replica`: a read that
    may lag."""
    page_sql, count_sql = statements
    async with db.loop_read(generic=generic, replica=replica) as connection:
        rows = await (await connection.execute(page_sql, params)).fetchall()
        if rows:
            position = rows[0][-1] or 0
        else:
            found = await (await connection.execute(_POSITION_TEXT, params)).fetchone()
            position = (found[0] if found else 0) or 0
        wanted = key(position)

        async def count() -> int:
            counted = await (await connection.execute(count_sql, params)).fetchone()
            return int(counted[0]) if counted else 0

        total = position if wanted is None else await totals.get_or_compute_async(wanted, count)
    return rows, total


# --- tamper evidence --------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    company_id: uuid.UUID
    head: chain.Head
    finding: chain.Finding | None


def checkpoints(session: Session, *, company_id: uuid.UUID | None = None) -> list[ActivityHead]:
    stmt = select(ActivityHead).order_by(ActivityHead.company_id)
    if company_id is not None:
        stmt = stmt.where(ActivityHead.company_id == company_id)
    return list(session.scalars(stmt))


def _links(session: Session, company_id: uuid.UUID) -> Generator[chain.Link]:
    """The company's entries in `seq` order, streamed; the cursor closes however it ends."""
    result = session.scalars(
        select(ActivityEntry)
        .where(ActivityEntry.company_id == company_id)
        .order_by(ActivityEntry.seq, ActivityEntry.id)
        .execution_options(yield_per=2000)
    )
    try:
        for row in result:
            yield chain.Link(
                seq=row.seq, fields=chain_fields(row), prev_hash=row.prev_hash, hash=row.hash
            )
            session.expunge(row)
    finally:
        result.close()


def verify(
    session: Session, *, company_id: uuid.UUID, checkpoint: chain.Head | None = None
) -> Verification:
    """Walk a company's chain; compare its end with the head row and a checkpoint."""
    links = _links(session, company_id)
    try:
        reached, finding = chain.walk(links)
    finally:
        links.close()
    if finding is None:
        head = session.get(ActivityHead, company_id)
        stored = chain.Head(head.count, head.hash) if head else chain.Head(0, chain.GENESIS)
        finding = chain.compare(reached, stored, source="the head row", exact=True)
    if finding is None and checkpoint is not None:
        finding = chain.compare(reached, checkpoint, source="the checkpoint", exact=False)
        if finding is None:
            at = session.scalar(
                select(ActivityEntry.hash).where(
                    ActivityEntry.company_id == company_id, ActivityEntry.seq == checkpoint.count
                )
            )
            finding = chain.matches_checkpoint(at, checkpoint)
    return Verification(company_id=company_id, head=reached, finding=finding)
