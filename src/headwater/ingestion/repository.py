"""Ingestion's reads that the hot path shares: a push's target, a dataset's record count,
a filter on a record field. Writing records is a sink's (`sinks`)."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Connection,
    Uuid,
    and_,
    bindparam,
    func,
    literal,
    select,
)

from headwater.db import Database, driver_execute, pg_text
from headwater.identity.models import IngestionClient
from headwater.ingestion.models import Dataset, Record, RecordCount

# The client a push names and its dataset, in one query: a row with the client's
# company_id and revoked_at, and the dataset's id (None if it has no such dataset),
# schema_version, options, transform_version and subjects_version; no row if there is
# no such client.
TARGET = (
    select(
        IngestionClient.company_id,
        IngestionClient.revoked_at,
        Dataset.id,
        Dataset.schema_version,
        Dataset.options,
        Dataset.transform_version,
        Dataset.subjects_version,
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
TARGET_SQL = pg_text(TARGET)


def target(connection: Connection, client_id: str, dataset_id: str) -> Any:
    """The client's state and the named dataset's (see TARGET); None: no such client."""
    params = {"client_id": client_id, "dataset_id": dataset_id}
    if connection.dialect.name == "postgresql":
        rows = driver_execute(connection, TARGET_SQL, params)
        return rows[0] if rows else None
    return connection.execute(TARGET, params).one_or_none()


async def target_on_loop(db: Database, client_id: str, dataset_id: str) -> Any:
    """`target`, read on the event loop (PostgreSQL: `Database.loop_read`; its plan is
    the same for any values)."""
    params = {"client_id": client_id, "dataset_id": dataset_id}
    async with db.loop_read(generic=True) as connection:
        return await (await connection.execute(TARGET_SQL, params)).fetchone()


_COUNTS = RecordCount.__table__
_TOTAL = select(func.coalesce(func.sum(_COUNTS.c.records), 0)).where(
    _COUNTS.c.dataset_pk == bindparam("dataset_pk", type_=Uuid())
)


def count_records(connection: Connection, *, dataset_pk: uuid.UUID) -> int:
    """How many records the dataset holds: a sum over its count's shards."""
    return int(connection.scalar(_TOTAL, {"dataset_pk": dataset_pk}) or 0)


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
