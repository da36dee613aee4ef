"""A dataset's records as callers read them: a page (`list_records`) or every one as
NDJSON (`stream_records`), staged files' records left out; and as exports read them
(`for_export`, and `for_export_sql` for PostgreSQL's COPY)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, cast, func, literal, select, tuple_
from sqlalchemy.orm import Session

from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import datasets, feed, staging
from headwater.ingestion.models import Record
from headwater.ingestion.repository import count_records, field_equals
from headwater.ingestion.schemas import RecordQuery, RecordRead

STREAM_BATCH = 1000


def _records_statement(
    session: Session, caller: Principal, query: RecordQuery
) -> tuple[Select[Any], uuid.UUID]:
    """The matching records' statement, and the dataset's primary key."""
    dataset = datasets.caller_dataset(session, caller, query.client_id, query.dataset_id)
    statement = select(
        Record.record_id,
        Record.transaction_id,
        Record.schema_version,
        Record.transform_version,
        Record.ingested_at,
        Record.data,
    ).where(Record.dataset_pk == dataset.id, staging.visible(dataset.id))
    if query.transaction_id is not None:
        statement = statement.where(Record.transaction_id == query.transaction_id)
    if query.ingested_after is not None:
        statement = statement.where(Record.ingested_at >= query.ingested_after)
    if query.ingested_before is not None:
        statement = statement.where(Record.ingested_at < query.ingested_before)
    dialect = session.get_bind().dialect.name
    for name, value in (query.filter or {}).items():
        statement = statement.where(field_equals(dialect, name, value))
    return statement, dataset.id


_ORDER = (Record.ingested_at, Record.seq)


def list_records(
    session: Session, caller: Principal, query: RecordQuery
) -> tuple[list[RecordRead], int]:
    statement, dataset_pk = _records_statement(session, caller, query)
    rows = session.execute(
        statement.order_by(*_ORDER).offset(query.offset).limit(query.page_size)
    ).all()
    narrowed = (query.transaction_id, query.ingested_after, query.ingested_before, query.filter)
    if any(value is not None for value in narrowed):
        total = session.scalar(select(func.count()).select_from(statement.subquery())) or 0
    else:  # the whole dataset: its kept count, not a scan of every record
        total = count_records(session.connection(), dataset_pk=dataset_pk)
    return [RecordRead.model_validate(row, from_attributes=True) for row in rows], total


def _line(row: Any) -> bytes:
    """A record as an NDJSON line: `RecordRead`'s JSON text, its data as stored."""
    return feed.row_json(row).encode()


def stream_records(db: Database, caller: Principal, query: RecordQuery) -> Iterator[bytes]:
    """Every matching record as NDJSON, in storage order, with constant memory.

    Access is checked before the first line, so a refused request answers an error
    rather than a broken stream. The stream reads in keyset-ordered chunks, each in a
    short transaction of its own, so a slow reader holds no lock and no cursor.
    """
    with db.replica_session() as session:
        statement = _records_statement(session, caller, query)[0].with_only_columns(
            Record.record_id,
            Record.transaction_id,
            Record.schema_version,
            Record.transform_version,
            Record.ingested_at,
            cast(Record.data, Text).label("data"),  # the JSON text as stored
            Record.seq,
        )

    def lines() -> Iterator[bytes]:
        after: tuple[Any, int] | None = None
        while True:
            chunk = statement.order_by(*_ORDER).limit(STREAM_BATCH)
            if after is not None:
                last = tuple_(*(literal(v, c.type) for v, c in zip(after, _ORDER, strict=True)))
                chunk = chunk.where(tuple_(*_ORDER) > last)
            with db.replica_session() as session:
                rows = session.execute(chunk).all()
            if not rows:
                return
            yield b"".join(_line(row) + b"\n" for row in rows)
            after = (rows[-1].ingested_at, rows[-1].seq)

    return lines()


def for_export(
    dataset_pk: uuid.UUID, *, after: datetime | None, before: datetime | None
) -> Select[Any, Any, Any, Any, Any, Any]:
    """A dataset's visible records ingested in [`after`, `before`), in storage order:
    `record_id`, `transaction_id`, `schema_version`, `ingested_at`, `transform_version`
    and the record's JSON as text."""
    statement = select(
        Record.record_id,
        Record.transaction_id,
        Record.schema_version,
        Record.ingested_at,
        Record.transform_version,
        cast(Record.data, Text),
    ).where(Record.dataset_pk == dataset_pk, staging.visible(dataset_pk))
    if after is not None:
        statement = statement.where(Record.ingested_at >= after)
    if before is not None:
        statement = statement.where(Record.ingested_at < before)
    return statement.order_by(Record.ingested_at, Record.seq)


# PostgreSQL's COPY of `for_export` is written as SQL text: the table, which the text
# names `r`, and its order
EXPORT_TABLE = Record.__tablename__
EXPORT_ORDER = "r.ingested_at, r.seq"


def for_export_sql(
    dataset_pk: uuid.UUID, *, after: datetime | None, before: datetime | None
) -> tuple[str, list[Any]]:
    """`for_export`'s condition as SQL text over `EXPORT_TABLE AS r` (psycopg's `%s`
    parameters), with its parameters."""
    where = "r.dataset_pk = %s AND " + staging.VISIBLE_SQL
    params: list[Any] = [dataset_pk, dataset_pk]
    if after is not None:
        where += " AND r.ingested_at >= %s"
        params.append(after)
    if before is not None:
        where += " AND r.ingested_at < %s"
        params.append(before)
    return where, params
