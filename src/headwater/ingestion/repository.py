"""Storing records in bulk: one statement per batch, never one INSERT per record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import psycopg
from sqlalchemy import (
    ColumnElement,
    Connection,
    Uuid,
    and_,
    bindparam,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

from headwater.db import driver_execute
from headwater.identity.models import IngestionClient
from headwater.ingestion.models import Dataset, Record, RecordCount, Transaction

# PostgreSQL: the batch travels as one array of JSON texts in binary form, so the server
# reads each record's JSON once (the cast to json) and makes the rows and their ids. As
# one JSON array, it was read twice: by json's input function and by json_array_elements.
# The planner knows that WITH ORDINALITY numbers rows in order: no sort.
_RECORDS_INTO = """
INSERT INTO records
    (record_id, company_id, dataset_pk, transaction_id, schema_version, ingested_at, data)
"""
_UNNEST = (
    _RECORDS_INTO
    + """
SELECT gen_random_uuid(), %(company_id)s, %(dataset_pk)s, %(transaction_id)s,
       %(schema_version)s, %(ingested_at)s, data::json
FROM unnest(%(data)b::text[]) WITH ORDINALITY AS batch(data, n)
ORDER BY n
"""
)
_INSERT = insert(Record)
_COUNTS = RecordCount.__table__
_INSERT_TRANSACTION = insert(Transaction)

# PostgreSQL: transaction rows, the records of their batches and the record counts, in
# one statement. One statement is atomic by itself, so it may run in autocommit: one
# round trip, where BEGIN, four statements and COMMIT took six. The transactions and
# counts travel as one JSON text each. The records of one batch are `_UNNEST`'s; those
# of several come with the id of the transaction each belongs to (a binary uuid[]),
# whose row gives their other columns (a join, and a sort to keep their order).
_STORE_HEAD = """
WITH new_transactions AS (
    INSERT INTO transactions
    SELECT * FROM json_populate_recordset(NULL::transactions, %(transactions)s::json)
    RETURNING id, company_id, dataset_pk, schema_version, created_at
), counted AS (
    INSERT INTO dataset_record_counts (dataset_pk, shard, records)
    SELECT dataset_pk, shard, records
    FROM json_to_recordset(%(counts)s::json) AS c(dataset_pk uuid, shard smallint, records bigint)
    ORDER BY dataset_pk
    ON CONFLICT (dataset_pk, shard)
    DO UPDATE SET records = dataset_record_counts.records + excluded.records
)
"""
_STORE_ONE = _STORE_HEAD + _UNNEST
_STORE = (
    _STORE_HEAD
    + _RECORDS_INTO
    + """
SELECT gen_random_uuid(), t.company_id, t.dataset_pk, t.id, t.schema_version, t.created_at,
       r.data::json
FROM unnest(%(records)b::text[], %(owners)b::uuid[]) WITH ORDINALITY AS r(data, owner, n)
JOIN new_transactions AS t ON t.id = r.owner
ORDER BY r.n
"""
)


# The client a push names and its dataset, in one query: a row with the client's
# company_id and revoked_at, and the dataset's id (None if it has no such dataset),
# schema_version and options; no row if there is no such client.
_TARGET = (
    select(
        IngestionClient.company_id,
        IngestionClient.revoked_at,
        Dataset.id,
        Dataset.schema_version,
        Dataset.options,
    )
    .outerjoin(
        Dataset,
        and_(
            Dataset.client_id == IngestionClient.client_id,
            Dataset.dataset_id == bindparam("dataset_id"),
        ),
    )
    .where(IngestionClient.client_id == bindparam("client_id"))
)
# The same query as text for psycopg itself (PostgreSQL; `%(name)s` parameters).
_TARGET_SQL = str(_TARGET.compile(dialect=PGDialect_psycopg()))  # type: ignore[no-untyped-call]


def target(connection: Connection, client_id: str, dataset_id: str) -> Any:
    """The client's state and the named dataset's (see _TARGET); None: no such client."""
    params = {"client_id": client_id, "dataset_id": dataset_id}
    if connection.dialect.name == "postgresql":
        rows = driver_execute(connection, _TARGET_SQL, params)
        return rows[0] if rows else None
    return connection.execute(_TARGET, params).one_or_none()


async def target_async(
    connection: psycopg.AsyncConnection[Any], client_id: str, dataset_id: str
) -> Any:
    """`target` on an asyncio psycopg connection (PostgreSQL)."""
    cursor = await connection.execute(
        _TARGET_SQL, {"client_id": client_id, "dataset_id": dataset_id}
    )
    return await cursor.fetchone()


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Records of one transaction, to be stored together; `texts` may give the JSON text
    of some of them (None where it is not known)."""

    records: Sequence[dict[str, Any]]
    company_id: uuid.UUID
    dataset_pk: uuid.UUID
    transaction_id: uuid.UUID
    schema_version: int
    ingested_at: datetime
    texts: Sequence[str | None] | None = None

    def json_texts(self) -> list[str]:
        """Each record's JSON text, in order."""
        if self.texts is None:
            return [_json(record) for record in self.records]
        return [
            _json(record) if text is None else text
            for record, text in zip(self.records, self.texts, strict=True)
        ]

    @property
    def shard(self) -> int:
        return self.transaction_id.int % RecordCount.SHARDS


# Portable upsert: PostgreSQL and SQLite both take ON CONFLICT ... DO UPDATE.
_ADD_TO_COUNT = text(
    "INSERT INTO dataset_record_counts (dataset_pk, shard, records) "
    "VALUES (:dataset_pk, :shard, :records) "
    "ON CONFLICT (dataset_pk, shard) "
    "DO UPDATE SET records = dataset_record_counts.records + excluded.records"
).bindparams(bindparam("dataset_pk", type_=Uuid()))


def _counts(batches: Sequence[RecordBatch]) -> list[dict[str, Any]]:
    """What the batches add to their datasets' record counts, datasets in sorted order.

    All of it goes to one shard (the first batch's), so one database transaction locks
    one count row per dataset: a file's many batches the same row each time, and a group
    of pushes one row rather than many. Datasets are locked in one order (sorted), so two
    transactions never wait on each other's rows in opposite order.
    """
    shard = batches[0].shard
    added: dict[uuid.UUID, int] = {}
    for batch in batches:
        added[batch.dataset_pk] = added.get(batch.dataset_pk, 0) + len(batch.records)
    return [
        {"dataset_pk": dataset_pk, "shard": shard, "records": count}
        for dataset_pk, count in sorted(added.items())
    ]


def _add_to_counts(connection: Connection, batches: Sequence[RecordBatch]) -> None:
    """Add to the datasets' record counts, in the same database transaction as the rows."""
    for count in _counts(batches):
        connection.execute(_ADD_TO_COUNT, count)


def store(
    connection: Connection, transactions: Sequence[dict[str, Any]], batches: Sequence[RecordBatch]
) -> None:
    """Add transaction rows (dicts of column values) and the records of their batches,
    counted. Each batch's `transaction_id` names one of the rows, whose company, dataset,
    schema version and creation time its records take.

    PostgreSQL: one statement, atomic by itself (the connection may be in autocommit).
    Elsewhere: several, which the caller's transaction makes atomic.
    """
    if connection.dialect.name != "postgresql":
        connection.execute(_INSERT_TRANSACTION, list(transactions))
        insert_batches(connection, batches)
        return
    driver_execute(connection, *_store_statement(transactions, batches))


async def store_async(
    connection: psycopg.AsyncConnection[Any],
    transactions: Sequence[dict[str, Any]],
    batches: Sequence[RecordBatch],
) -> None:
    """`store` on an asyncio psycopg connection (PostgreSQL): one statement, atomic by
    itself; in autocommit, committed when it returns."""
    await connection.execute(*_store_statement(transactions, batches))


def _store_statement(
    transactions: Sequence[dict[str, Any]], batches: Sequence[RecordBatch]
) -> tuple[str, dict[str, Any]]:
    """`store`'s statement on PostgreSQL and its parameters."""
    batches = [batch for batch in batches if batch.records]
    params: dict[str, Any] = {
        "transactions": orjson.dumps(transactions).decode(),
        "counts": orjson.dumps(_counts(batches) if batches else []).decode(),
    }
    if len(batches) == 1:
        return _STORE_ONE, params | _batch_params(batches[0])
    params["records"] = [text for batch in batches for text in batch.json_texts()]
    params["owners"] = [batch.transaction_id for batch in batches for _ in batch.records]
    return _STORE, params


def _batch_params(batch: RecordBatch) -> dict[str, Any]:
    """`_UNNEST`'s parameters for the batch."""
    return {
        "company_id": batch.company_id,
        "dataset_pk": batch.dataset_pk,
        "transaction_id": batch.transaction_id,
        "schema_version": batch.schema_version,
        "ingested_at": batch.ingested_at,
        "data": batch.json_texts(),
    }


def _json(record: dict[str, Any]) -> str:
    return orjson.dumps(record).decode()


_TOTAL = select(func.coalesce(func.sum(_COUNTS.c.records), 0)).where(
    _COUNTS.c.dataset_pk == bindparam("dataset_pk", type_=Uuid())
)


def count_records(connection: Connection, *, dataset_pk: uuid.UUID) -> int:
    """How many records the dataset holds: a sum over its count's shards."""
    return int(connection.scalar(_TOTAL, {"dataset_pk": dataset_pk}) or 0)


def insert_records(
    connection: Connection,
    records: Sequence[dict[str, Any]],
    *,
    company_id: uuid.UUID,
    dataset_pk: uuid.UUID,
    transaction_id: uuid.UUID,
    schema_version: int,
    ingested_at: datetime,
) -> None:
    """Add `records` to the connection's transaction, in their order, and count them."""
    insert_batches(
        connection,
        [RecordBatch(records, company_id, dataset_pk, transaction_id, schema_version, ingested_at)],
    )


def insert_batches(connection: Connection, batches: Sequence[RecordBatch]) -> None:
    """Add the batches' records to the connection's transaction, in their order, and
    count them: one INSERT a batch on PostgreSQL, one executemany elsewhere."""
    batches = [batch for batch in batches if batch.records]
    if not batches:
        return
    _add_to_counts(connection, batches)
    if connection.dialect.name == "postgresql":
        for batch in batches:
            connection.exec_driver_sql(_UNNEST, _batch_params(batch))
        return
    connection.execute(
        _INSERT,
        [
            {
                "record_id": uuid.uuid4(),
                "company_id": batch.company_id,
                "dataset_pk": batch.dataset_pk,
                "transaction_id": batch.transaction_id,
                "schema_version": batch.schema_version,
                "ingested_at": batch.ingested_at,
                "data": data,
            }
            for batch in batches
            for data in batch.records
        ],
    )


def field_equals(dialect: str, name: str, value: str | int | float | bool) -> ColumnElement[bool]:
    """Records whose top-level field `name` equals `value` (JSON types compared exactly).

    PostgreSQL compares the field's JSON text and its JSON type, so 1 never matches "1";
    SQLite's json_extract answers typed SQL values, and a type check does the same there.
    """
    kind = _JSON_KIND[type(value)]
    if dialect == "postgresql":
        text = orjson.dumps(value).decode() if not isinstance(value, str) else value
        field = Record.data.op("->")(literal(name))
        return (func.json_typeof(field) == kind) & (Record.data.op("->>")(literal(name)) == text)
    path = '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    extracted = func.json_extract(Record.data, path)
    kind_of = func.json_type(Record.data, path)
    if kind == "boolean":
        return kind_of == ("true" if value else "false")
    if kind == "number":
        return kind_of.in_(["integer", "real"]) & (extracted == value)
    return (kind_of == "text") & (extracted == value)


_JSON_KIND = {str: "string", int: "number", float: "number", bool: "boolean"}
