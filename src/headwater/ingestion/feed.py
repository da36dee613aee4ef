"""The record feed (`GET /platform/v1/data/changes`): a dataset's records in the order
their transactions committed, after an opaque cursor, every record exactly once.

Why positions are given after the commit, and to transactions rather than records:
records are inserted by many writers at once (pushes, file workers, SFTP, email), and a
writer that inserted first may commit last; a reader following the records' insertion
number (`seq`) would pass the gap that a long file fills later, and never see it.
`sequence` instead numbers a dataset's stored transactions that have already committed,
one numbering of a dataset at a time (its `record_feed_heads` row is locked): every
position it gives becomes visible at once, at its commit, and any later position is
given by a later numbering, which starts only after that commit. So a reader that sees
position n of a dataset sees every position below it, and a cursor never skips.

The feed's order is (transaction position, record `seq`): a transaction's records in
the order they were stored. A cursor is the last record read, (position, seq); a page
walks indexes from it (`ix_transactions_feed`, then `ix_records_transaction_id`), so
its cost does not grow with the dataset. Positions are given when the feed is read,
and only then: a dataset nobody follows pays nothing for them. A reader's request only
asks for them (`number`): the process's numbering gives them, in a short transaction of
its own, one numbering of a dataset serving every reader that asked while the one
before ran, so no GET request writes.

A record removed (an erasure, retention: `ingestion.erasure`) appears once more as a
tombstone, `{"record_id", "erased": true}`, at a position of its own, given from the
same numbering when it was removed: a follower reads it after the record, if it read
that, and deletes its copy. A cursor stays valid as long as its transaction's row (kept
for good) or its tombstones exist; a transaction whose records were removed holds fewer
than its count, so a page may come back short of `limit` with more after it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    cast,
    exists,
    func,
    literal,
    literal_column,
    select,
    text,
    tuple_,
    union_all,
)

from headwater.db import (
    NUMBERING_WAIT,
    Database,
    Numbering,
    driver_execute,
    unless_writer_busy,
)
from headwater.errors import InvalidCursor
from headwater.ingestion.models import (
    UNFED,
    Dataset,
    FeedHead,
    Record,
    RecordTombstone,
    Transaction,
)
from headwater.kit import cursors
from headwater.kit.clock import iso_ms
from headwater.kit.coalesce import Coalescer

# Numbers a dataset's stored transactions that have no position yet, from its head on,
# in the order they completed.
_NUMBERING = Numbering(
    head_key=FeedHead.dataset_pk,
    table="transactions",
    id="id",
    position="feed_pos",
    scope="dataset_pk",
    unnumbered=UNFED,
    order="completed_at, id",
    key_type=Transaction.dataset_pk.type,
    company_of=lambda dataset_pk: (
        select(Dataset.company_id).where(Dataset.id == dataset_pk).scalar_subquery()
    ),
)
SEQUENCE_BATCH = 5000


def pending(connection: Connection, dataset_pk: uuid.UUID) -> bool:
    """Whether a committed transaction of the dataset waits for its position: an index
    probe (the predicate is literal SQL, so PostgreSQL's generic plans use the partial
    index too)."""
    return bool(
        connection.scalar(select(exists().where(Transaction.dataset_pk == dataset_pk, text(UNFED))))
    )


def sequence(connection: Connection, dataset_pk: uuid.UUID, *, limit: int = SEQUENCE_BATCH) -> int:
    """Give the dataset's oldest committed, unnumbered transactions (at most `limit`) the
    next positions; how many. Waits while another process numbers the same dataset."""
    return _NUMBERING.give(connection, dataset_pk, limit=limit)[1]


def catch_up(db: Database, dataset_pk: uuid.UUID) -> None:
    """Number what has committed and waits for its place."""
    with unless_writer_busy(), db.begin() as connection:
        sequence(connection, dataset_pk)


def number(db: Database, numbering: Coalescer, dataset_pk: uuid.UUID) -> None:
    """Have the process's numbering give places to what the dataset has committed, and
    wait for it (at most `NUMBERING_WAIT`): a reader's request writes nothing itself."""
    numbering.ask(("records", dataset_pk), lambda: catch_up(db, dataset_pk), timeout=NUMBERING_WAIT)


# --- cursors ----------------------------------------------------------------------------------

_PREFIX = "r1"
_ERASED = "e1"  # a cursor at a tombstone


@dataclass(frozen=True, slots=True)
class Cursor:
    """The last record read: its transaction's position and its `seq` (0, 0: none);
    `erased`: a tombstone, at its removal's position."""

    pos: int
    seq: int
    erased: bool = False

    def encode(self, dataset_pk: uuid.UUID) -> str:
        prefix = _ERASED if self.erased else _PREFIX
        return cursors.pack(prefix, self.pos, self.seq, _tag(dataset_pk))


START = Cursor(0, 0)


def _tag(dataset_pk: uuid.UUID) -> str:
    return dataset_pk.hex[:8]


def decode(cursor: str | None, dataset_pk: uuid.UUID) -> Cursor:
    """The place a cursor names; 400 for anything that is not one of this dataset's."""
    if cursor is None:
        return START
    parts = cursors.unpack(cursor)
    pos, seq = (cursors.number(p) for p in parts[1:3]) if len(parts) == 4 else (None, None)
    if parts[:1] not in ([_PREFIX], [_ERASED]) or pos is None or seq is None:
        raise InvalidCursor(
            "`after` is not a cursor this feed gave; pass a `next_cursor` as it came, or "
            "leave `after` out to read from the dataset's first record."
        )
    if parts[3] != _tag(dataset_pk):
        raise InvalidCursor("`after` is a cursor of another dataset's feed.")
    return Cursor(pos, seq, erased=parts[0] == _ERASED)


# --- pages ------------------------------------------------------------------------------------

# A page is made of chunks: the records a page takes of one transaction, as
# `RecordRead` JSON texts joined by commas, with their count and the last one's `seq`.
# PostgreSQL renders and joins them itself (the uuids, the time with milliseconds as
# `iso_ms` writes it, the record's JSON text as stored): one row a transaction, no
# Python code touching a record (`bench.downstream`'s COPY anchor renders with it too).
# Elsewhere a chunk is made from rows, in Python.
LINE_SQL = (
    """'{"record_id":"' || records.record_id || '","transaction_id":"' """
    """|| records.transaction_id || '","schema_version":' || records.schema_version """
    """|| ',"transform_version":' || coalesce(records.transform_version::text, 'null') """
    """|| ',"ingested_at":"' || to_char(records.ingested_at AT TIME ZONE 'UTC', """
    """'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '","data":' || records.data::text || '}'"""
)
# PostgreSQL's read of one transaction's records after a cursor (the hottest query: a
# reader catching up runs one a page), as text for psycopg itself: `_after`'s walk, then
# one row. The transaction is named by id, or by its place (`{transaction}`).
_ONE_SQL = f"""
SELECT count(*) AS count, max(seq) AS last_seq, string_agg(line, ',' ORDER BY seq) AS text
FROM (
    SELECT transaction_id, seq, {LINE_SQL} AS line FROM records
    WHERE (transaction_id, seq) > ({{transaction}}, %(seq)s)
    ORDER BY transaction_id, seq LIMIT %(limit)s
) AS walked
WHERE transaction_id = {{transaction}}
"""  # noqa: S608 (constants of ours)
_BY_ID = _ONE_SQL.replace("{transaction}", "%(transaction)s::uuid")
_BY_PLACE = _ONE_SQL.replace(
    "{transaction}",
    "(SELECT id FROM transactions WHERE dataset_pk = %(dataset)s AND feed_pos = %(pos)s)",
)
# PostgreSQL's other two page queries, as text for psycopg too: the transactions after a
# place, and the records of whole transactions, one row each.
_FOLLOWING_SQL = """
(SELECT id, feed_pos, records_accepted::bigint AS records_accepted, false AS erased
 FROM transactions
 WHERE dataset_pk = %(dataset)s AND feed_pos > %(pos)s ORDER BY feed_pos LIMIT %(limit)s)
UNION ALL
(SELECT NULL::uuid, pos, count(*), true FROM record_tombstones
 WHERE dataset_pk = %(dataset)s AND pos > %(pos)s GROUP BY pos ORDER BY pos LIMIT %(limit)s)
ORDER BY feed_pos LIMIT %(limit)s
"""
# A tombstone's line: the record's id, erased.
_TOMBSTONE_SQL = """
SELECT pos, count(*) AS count, max(seq) AS last_seq,
       string_agg('{"record_id":"' || record_id || '","erased":true}', ',' ORDER BY seq) AS text
FROM (
    SELECT pos, seq, record_id FROM record_tombstones
    WHERE dataset_pk = %(dataset)s AND pos = ANY(%(places)s) AND (pos, seq) > (%(pos)s, %(seq)s)
    ORDER BY pos, seq LIMIT %(limit)s
) AS walked
GROUP BY pos
"""
_WHOLE_SQL = f"""
SELECT transaction_id, count(*) AS count, max(seq) AS last_seq,
       string_agg({LINE_SQL}, ',' ORDER BY seq) AS text
FROM records WHERE transaction_id = ANY(%(transactions)s) GROUP BY transaction_id
"""  # noqa: S608 (constants of ours)
_PORTABLE = (
    Record.transaction_id,
    Record.seq,
    Record.record_id,
    Record.schema_version,
    Record.transform_version,
    Record.ingested_at,
    # the JSON text as stored: spliced into the page, never parsed
    cast(Record.data, Text).label("data"),
)


@dataclass(frozen=True, slots=True)
class Chunk:
    transaction_id: Any
    count: int
    last_seq: int
    text: str


@dataclass(frozen=True, slots=True)
class Changes:
    """A page: its records (JSON texts joined by commas, `RecordRead`'s form), how many,
    and the cursor after them."""

    text: str
    count: int
    cursor: Cursor

    def body(self, dataset_pk: uuid.UUID) -> bytes:
        return (
            f'{{"data":[{self.text}],"next_cursor":"{self.cursor.encode(dataset_pk)}"}}'
        ).encode()


def record_json(
    record_id: object,
    transaction_id: object,
    schema_version: int,
    transform_version: int | None,
    ingested_at: str,
    data: str,
) -> str:
    """A record as `RecordRead`'s JSON text, from its parts (`data` JSON text already):
    the portable feed's, and an NDJSON export's lines. PostgreSQL's `LINE_SQL` writes
    the same text."""
    return (
        f'{{"record_id":"{record_id}","transaction_id":"{transaction_id}",'
        f'"schema_version":{schema_version},'
        f'"transform_version":{"null" if transform_version is None else transform_version},'
        f'"ingested_at":"{ingested_at}","data":{data}}}'
    )


def row_json(row: Any) -> str:
    """`record_json` of a row holding a record's columns (its data as JSON text)."""
    return record_json(
        row.record_id,
        row.transaction_id,
        row.schema_version,
        row.transform_version,
        iso_ms(row.ingested_at),
        row.data,
    )


def _after(transaction_id: Any, seq: int) -> Any:
    """The records of a transaction after `seq`, in `seq` order.

    Written as a walk of `ix_records_transaction_id` from (transaction, seq), limited,
    then narrowed to the transaction: so PostgreSQL reads at most `limit` index entries
    whatever it guesses of the transaction's size. As `transaction_id = t AND seq > s`,
    a low guess made it read every record of the transaction after the cursor (a
    million, for a big file) and sort them, to answer a thousand."""
    if isinstance(transaction_id, uuid.UUID):
        transaction_id = literal(transaction_id, Record.transaction_id.type)
    return tuple_(Record.transaction_id, Record.seq) > tuple_(transaction_id, literal(seq))


def _chunks(
    connection: Connection, where: Any, *, limit: int | None = None, of: Any = None
) -> list[Chunk]:
    """The portable reads: the chunks of the records `where` selects, one a
    transaction; with `limit`, at most that many, in `seq` order, of the transaction
    `of` (`where` is an `_after`)."""
    picked = select(*_PORTABLE).where(where)
    if limit is not None:
        walked = picked.order_by(Record.transaction_id, Record.seq).limit(limit).subquery()
        picked = select(walked).where(walked.c.transaction_id == of)
    grouped: dict[Any, list[Any]] = {}
    for row in connection.execute(picked.order_by(literal_column("seq"))):
        grouped.setdefault(row.transaction_id, []).append(row)
    return [
        Chunk(key, len(rows), rows[-1].seq, ",".join(row_json(row) for row in rows))
        for key, rows in grouped.items()
    ]


def page(
    db: Database, dataset_pk: uuid.UUID, cursor: Cursor, *, limit: int, numbering: Coalescer
) -> Changes:
    """`read`, on the replica where one is set (HEADWATER_DATABASE_READ_URL). A full page
    is the answer: a full page after a cursor never changes, however far the replica
    lags. Otherwise its reader is at the end of what has a place: the dataset's
    transactions committed since the last numbering are numbered (`number`, off the
    request) and the page is read again where everything numbered shows (`caught_up`:
    the replica once it has replayed that far, else the database), so a reader sees its
    own writes at once. A reader catching up pays for no probe."""
    with db.replica_connection() as connection:
        try:
            changes: Changes | None = read(connection, dataset_pk, cursor, limit=limit)
        except InvalidCursor:
            if not db.has_replica:
                raise
            changes = None  # the replica has not replayed the cursor's place yet
        if changes is not None and changes.count == limit:
            return changes
        if not db.has_replica:  # the database itself: probed on the same connection
            waiting = pending(connection, dataset_pk)
            if not waiting and changes is not None:  # (None only with a replica)
                return changes
    if db.has_replica:
        with db.read_connection() as connection:
            waiting = pending(connection, dataset_pk)
    if waiting:
        number(db, numbering, dataset_pk)
    with db.caught_up(lambda c: head(c, dataset_pk)) as connection:
        return read(connection, dataset_pk, cursor, limit=limit)


def head(connection: Connection, dataset_pk: uuid.UUID) -> int:
    """The dataset's last position given (0: none yet)."""
    found = connection.scalar(select(FeedHead.pos).where(FeedHead.dataset_pk == dataset_pk))
    return int(found or 0)


def read(connection: Connection, dataset_pk: uuid.UUID, cursor: Cursor, *, limit: int) -> Changes:
    """Up to `limit` records after `cursor`, in feed order. At most four index walks:
    the rest of the cursor's transaction, the next transactions' positions, the records
    of those taken whole (their counts are known), and part of the last one; and the
    tombstones of any removals among them."""
    taken: list[tuple[int, Chunk, bool]] = []  # (position, chunk, erased)
    if cursor.pos:
        if cursor.erased:
            rest = _tombstones(connection, dataset_pk, [cursor.pos], cursor, limit)
        else:
            rest = _rest(connection, dataset_pk, cursor, limit)
        taken += [(cursor.pos, c, cursor.erased) for c in rest]
    wanted = limit - sum(chunk.count for _, chunk, _ in taken)
    if wanted > 0:
        following = _following(connection, dataset_pk, cursor.pos, wanted)
        if cursor.pos and not taken and not following:
            _check_place(connection, dataset_pk, cursor)
        whole, counted = 0, 0
        while whole < len(following) and counted + following[whole].records_accepted <= wanted:
            counted += following[whole].records_accepted
            whole += 1
        if whole:
            places = {row.id: row.feed_pos for row in following[:whole] if not row.erased}
            chunks = [
                (places[c.transaction_id], c, False) for c in _whole(connection, list(places))
            ]
            removals = [row.feed_pos for row in following[:whole] if row.erased]
            if removals:
                found = _tombstones(connection, dataset_pk, removals, Cursor(0, 0), wanted)
                chunks += [(c.transaction_id, c, True) for c in found]
            taken += sorted(chunks, key=lambda t: t[0])
            # (a transaction holding more records than its count would make the page
            # longer than `limit`, never skip or repeat a record: its count is written
            # with its records, by the sink)
        if whole < len(following) and counted < wanted:
            part = following[whole]
            if part.erased:
                start = Cursor(part.feed_pos, 0)
                rest = _tombstones(connection, dataset_pk, [part.feed_pos], start, wanted - counted)
            else:
                rest = _rest(
                    connection, dataset_pk, Cursor(part.feed_pos, 0), wanted - counted, part.id
                )
            taken += [(part.feed_pos, c, part.erased) for c in rest]
    last = cursor
    if taken:
        pos, chunk, erased = taken[-1]
        last = Cursor(pos, chunk.last_seq, erased)
    return Changes(
        ",".join(chunk.text for _, chunk, _ in taken), sum(c.count for _, c, _ in taken), last
    )


def _tombstones(
    connection: Connection, dataset_pk: uuid.UUID, places: list[int], after: Cursor, limit: int
) -> list[Chunk]:
    """The tombstones at these positions after `after`, at most `limit`, a chunk a
    position (its `transaction_id` the position), in feed order."""
    if connection.dialect.name == "postgresql":
        params = {
            "dataset": dataset_pk,
            "places": places,
            "pos": after.pos,
            "seq": after.seq,
            "limit": limit,
        }
        rows = driver_execute(connection, _TOMBSTONE_SQL, params)
        return sorted(
            (Chunk(r.pos, r.count, r.last_seq, r.text) for r in rows),
            key=lambda c: c.transaction_id,
        )
    found = connection.execute(
        select(RecordTombstone.pos, RecordTombstone.seq, RecordTombstone.record_id)
        .where(
            RecordTombstone.dataset_pk == dataset_pk,
            RecordTombstone.pos.in_(places),
            tuple_(RecordTombstone.pos, RecordTombstone.seq) > tuple_(after.pos, after.seq),
        )
        .order_by(RecordTombstone.pos, RecordTombstone.seq)
        .limit(limit)
    ).all()
    grouped: dict[int, list[Any]] = {}
    for row in found:
        grouped.setdefault(row.pos, []).append(row)
    return [
        Chunk(
            pos,
            len(rows),
            rows[-1].seq,
            ",".join(f'{{"record_id":"{row.record_id}","erased":true}}' for row in rows),
        )
        for pos, rows in grouped.items()
    ]


def _following(connection: Connection, dataset_pk: uuid.UUID, pos: int, limit: int) -> Any:
    """The dataset's next places after a place: a transaction's (id, place, records) or
    a removal's (None, place, tombstones), with `erased` saying which."""
    if connection.dialect.name == "postgresql":
        params = {"dataset": dataset_pk, "pos": pos, "limit": limit}
        return driver_execute(connection, _FOLLOWING_SQL, params)
    transactions = select(
        Transaction.id,
        Transaction.feed_pos,
        Transaction.records_accepted,
        literal(False).label("erased"),
    ).where(Transaction.dataset_pk == dataset_pk, Transaction.feed_pos > pos)
    removals = (
        select(
            literal(None, Transaction.id.type).label("id"),
            RecordTombstone.pos.label("feed_pos"),
            func.count().label("records_accepted"),
            literal(True).label("erased"),
        )
        .where(RecordTombstone.dataset_pk == dataset_pk, RecordTombstone.pos > pos)
        .group_by(RecordTombstone.pos)
    )
    both = union_all(transactions, removals).subquery()
    return connection.execute(select(both).order_by(both.c.feed_pos).limit(limit)).all()


def _whole(connection: Connection, transactions: list[Any]) -> list[Chunk]:
    """The records of whole transactions, a chunk each."""
    if connection.dialect.name == "postgresql":
        rows = driver_execute(connection, _WHOLE_SQL, {"transactions": transactions})
        return [Chunk(r.transaction_id, r.count, r.last_seq, r.text) for r in rows]
    return _chunks(connection, Record.transaction_id.in_(transactions))


def _rest(
    connection: Connection,
    dataset_pk: uuid.UUID,
    cursor: Cursor,
    limit: int,
    transaction_id: uuid.UUID | None = None,
) -> list[Chunk]:
    """The records after `cursor` in its transaction (named by id when known), at most
    `limit`, as a chunk (none when there are none)."""
    if connection.dialect.name == "postgresql":
        params = {"seq": cursor.seq, "limit": limit, "dataset": dataset_pk, "pos": cursor.pos}
        if transaction_id is not None:
            params["transaction"] = transaction_id
        statement = _BY_PLACE if transaction_id is None else _BY_ID
        row = driver_execute(connection, statement, params)[0]
        return [Chunk(None, row.count, row.last_seq, row.text)] if row.count else []
    of: Any = transaction_id
    if of is None:
        of = (
            select(Transaction.id)
            .where(Transaction.dataset_pk == dataset_pk, Transaction.feed_pos == cursor.pos)
            .scalar_subquery()
        )
    return _chunks(connection, _after(of, cursor.seq), limit=limit, of=of)


def _check_place(connection: Connection, dataset_pk: uuid.UUID, cursor: Cursor) -> None:
    """400 unless the dataset's feed has the cursor's position (a cursor at the feed's
    end)."""
    if cursor.erased:
        found = exists().where(
            RecordTombstone.dataset_pk == dataset_pk, RecordTombstone.pos == cursor.pos
        )
    else:
        found = exists().where(
            Transaction.dataset_pk == dataset_pk, Transaction.feed_pos == cursor.pos
        )
    if not connection.scalar(select(found)):
        raise InvalidCursor("`after` points past the end of the feed; pass a `next_cursor`.")
