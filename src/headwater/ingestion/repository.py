"""Storing records in bulk: one statement per batch, never one INSERT per record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import ColumnElement, Connection, func, insert, literal, select

from headwater.db import dialect_insert
from headwater.ingestion.models import Record, RecordCount

# PostgreSQL: the batch travels as one JSON array (one orjson call) and the server makes
# the rows and their ids; the client formats nothing per row.
_UNNEST = """
INSERT INTO records
    (record_id, company_id, dataset_pk, transaction_id, schema_version, ingested_at, data)
SELECT gen_random_uuid(), %(company_id)s, %(dataset_pk)s, %(transaction_id)s,
       %(schema_version)s, %(ingested_at)s, data
FROM json_array_elements(%(data)s::json) WITH ORDINALITY AS batch(data, n)
ORDER BY n
"""
_INSERT = insert(Record)
_COUNTS = RecordCount.__table__


def _add_to_count(
    connection: Connection, *, dataset_pk: uuid.UUID, transaction_id: uuid.UUID, added: int
) -> None:
    """Add to the dataset's record count, in the same database transaction as the rows.

    The shard follows from the transaction id, so all of one transaction's batches lock
    the same row (two transactions never wait on each other's rows in opposite order).
    """
    upsert = dialect_insert(connection.dialect)(_COUNTS).values(
        dataset_pk=dataset_pk, shard=transaction_id.int % RecordCount.SHARDS, records=added
    )
    connection.execute(
        upsert.on_conflict_do_update(
            index_elements=["dataset_pk", "shard"],
            set_={"records": _COUNTS.c.records + upsert.excluded.records},
        )
    )


def count_records(connection: Connection, *, dataset_pk: uuid.UUID) -> int:
    """How many records the dataset holds: a sum over its count's shards."""
    total = connection.scalar(
        select(func.coalesce(func.sum(_COUNTS.c.records), 0)).where(
            _COUNTS.c.dataset_pk == dataset_pk
        )
    )
    return int(total or 0)


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
    if not records:
        return
    _add_to_count(
        connection, dataset_pk=dataset_pk, transaction_id=transaction_id, added=len(records)
    )
    if connection.dialect.name == "postgresql":
        driver = connection.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor:
            cursor.execute(
                _UNNEST,
                {
                    "company_id": company_id,
                    "dataset_pk": dataset_pk,
                    "transaction_id": transaction_id,
                    "schema_version": schema_version,
                    "ingested_at": ingested_at,
                    "data": orjson.dumps(records).decode(),
                },
            )
        return
    connection.execute(
        _INSERT,
        [
            {
                "record_id": uuid.uuid4(),
                "company_id": company_id,
                "dataset_pk": dataset_pk,
                "transaction_id": transaction_id,
                "schema_version": schema_version,
                "ingested_at": ingested_at,
                "data": data,
            }
            for data in records
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
