"""Reading an export's records, in storage order, as Arrow batches of raw columns
(`columns.raw_schema`, or META plus `data`, the record's JSON text, for NDJSON).

Memory stays bounded: rows arrive in batches of a few megabytes. Both readers see one
snapshot (one statement): records that commit while an export runs are not in it.

PostgreSQL's reader (`copy_batches`) is the fast path: the server picks each record's
properties out of its JSON (`json_to_record`, one parse a row) and streams CSV through
COPY, read by a thread of its own; Arrow's multi-threaded CSV reader turns the blocks
into columns, and no Python code touches a value. The portable reader (`row_batches`)
goes row by row.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlalchemy import Connection

from headwater.exports.columns import Column, raw_schema, raw_value
from headwater.ingestion import records

CHUNK_ROWS = 20_000
COPY_BLOCK_BYTES = 2 * 1024 * 1024
PREFETCH_BLOCKS = 2
_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records: a dataset's, optionally within `[after, before)` of ingestion."""

    dataset_pk: uuid.UUID
    after: datetime | None
    before: datetime | None


def data_schema() -> pa.Schema:
    """NDJSON's raw batches: the record's own columns and its JSON text."""
    return pa.schema([*raw_schema([]), pa.field("data", pa.string())])


# --- portable ---------------------------------------------------------------------------------


def row_batches(
    connection: Connection, selection: Selection, props: list[Column] | None
) -> Generator[pa.RecordBatch]:
    """Raw batches read row by row; `props` None: NDJSON's batches."""
    statement = records.for_export(
        selection.dataset_pk, after=selection.after, before=selection.before
    )
    schema = data_schema() if props is None else raw_schema(props)
    result = connection.execution_options(stream_results=True, yield_per=CHUNK_ROWS).execute(
        statement
    )
    for rows in result.partitions():
        meta: list[list[Any]] = [
            [str(row[0]) for row in rows],
            [str(row[1]) for row in rows],
            [row[2] for row in rows],
            [row[3] for row in rows],
            [row[4] for row in rows],
        ]
        if props is None:
            extra: list[list[Any]] = [[row[5] for row in rows]]
        else:
            documents = [orjson.loads(row[5]) for row in rows]
            extra = [[raw_value(d.get(c.key), c.kind) for d in documents] for c in props]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(values, field.type)
                for values, field in zip(meta + extra, schema, strict=True)
            ],
            schema=schema,
        )


# --- PostgreSQL -------------------------------------------------------------------------------


# PostgreSQL truncates identifiers past 63 bytes: a longer property name is read by
# `->>` (which parses the record's JSON again) instead of json_to_record's column list
_IDENTIFIER_BYTES = 63


def _copy_statement(selection: Selection, props: list[Column] | None) -> tuple[Any, list[Any]]:
    """COPY of the selection's raw columns. Each record's JSON (as stored, `json`) is
    parsed once, by json_to_record, into the property columns: text for a string (as
    itself) or any other value (its JSON text), json for a `json` column."""
    from psycopg import sql  # PostgreSQL's path only: SQLite processes never load it

    params: list[Any] = []
    picked: list[sql.Composable] = []
    declared: list[sql.Composable] = []
    if props is None:
        picked.append(sql.SQL("r.data::text"))
    else:
        for column in props:
            kind = sql.SQL("json" if column.kind == "json" else "text")
            if len(column.key.encode()) > _IDENTIFIER_BYTES:
                arrow = sql.SQL("->" if column.kind == "json" else "->>")
                picked.append(sql.SQL("r.data {} %s").format(arrow))
                params.append(column.key)
            else:
                picked.append(sql.SQL("x.{}").format(sql.Identifier(column.key)))
                declared.append(sql.SQL("{} {}").format(sql.Identifier(column.key), kind))
    table = sql.Identifier(records.EXPORT_TABLE)
    source: sql.Composable = sql.SQL("{} AS r").format(table)
    if declared:
        source = sql.SQL("{} AS r CROSS JOIN LATERAL json_to_record(r.data) AS x({})").format(
            table, sql.SQL(", ").join(declared)
        )
    condition, condition_params = records.for_export_sql(
        selection.dataset_pk, after=selection.after, before=selection.before
    )
    params += condition_params
    statement = sql.SQL(
        "COPY (SELECT r.record_id, r.transaction_id, r.schema_version, "
        "(extract(epoch FROM r.ingested_at) * 1000000)::bigint, r.transform_version{picked} "
        "FROM {source} WHERE {where} ORDER BY {order}) TO STDOUT (FORMAT csv)"
    ).format(
        picked=sql.SQL("").join(sql.SQL(", ") + column for column in picked),
        source=source,
        where=sql.SQL(condition),
        order=sql.SQL(records.EXPORT_ORDER),
    )
    return statement, params


class _Abandoned(Exception):
    """The consumer stopped reading: the COPY is given up."""


def _blocks(copy: Any) -> Iterator[bytes]:
    """COPY's output in blocks of whole rows of about COPY_BLOCK_BYTES (each message
    COPY sends is one row)."""
    held: list[bytes] = []
    size = 0
    for message in copy:
        held.append(message)
        size += len(message)
        if size >= COPY_BLOCK_BYTES:
            yield b"".join(held)
            held, size = [], 0
    if held:
        yield b"".join(held)


def _prefetched(connection: Connection, statement: Any, params: list[Any]) -> Iterator[bytes]:
    """The COPY's blocks, read by a thread of their own while the caller parses and
    writes the ones before (so the server never waits on a full socket), at most
    PREFETCH_BLOCKS ahead: memory stays bounded. If the caller stops early, the COPY is
    given up and the connection is not used again."""
    blocks: queue.Queue[bytes | BaseException | None] = queue.Queue(PREFETCH_BLOCKS)
    stopped = threading.Event()

    def put(item: bytes | BaseException | None) -> None:
        while not stopped.is_set():
            try:
                blocks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Abandoned

    def read() -> None:
        driver: Any = connection.connection.dbapi_connection  # psycopg's own connection
        try:
            with driver.cursor() as cursor, cursor.copy(statement, params) as copy:
                for block in _blocks(copy):
                    put(block)
            put(None)
        except _Abandoned:
            pass
        except BaseException as exc:  # handed to the caller, which raises it
            with contextlib.suppress(_Abandoned):
                put(exc)

    reader = threading.Thread(target=read, name="export-copy", daemon=True)
    reader.start()
    finished = False
    try:
        while True:
            item = blocks.get()
            if item is None:
                finished = True
                return
            if isinstance(item, BaseException):
                finished = True
                raise item
            yield item
    finally:
        stopped.set()
        reader.join()
        if not finished and not connection.closed:  # a COPY cut short: state unknown
            connection.invalidate()


def copy_batches(
    connection: Connection, selection: Selection, props: list[Column] | None
) -> Generator[pa.RecordBatch]:
    """Raw batches from PostgreSQL's COPY, each block parsed by Arrow (on its threads)."""
    schema = data_schema() if props is None else raw_schema(props)
    statement, params = _copy_statement(selection, props)
    names = [f"c{i}" for i in range(len(schema))]
    types = [pa.string()] * len(schema)
    # schema_version, ingested_at (microseconds), transform_version
    types[2], types[3], types[4] = pa.int32(), pa.int64(), pa.int32()
    read_options = pacsv.ReadOptions(column_names=names)
    # a string may hold a line break (COPY quotes it)
    parse_options = pacsv.ParseOptions(newlines_in_values=True)
    convert_options = pacsv.ConvertOptions(
        column_types=dict(zip(names, types, strict=True)),
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    for block in _prefetched(connection, statement, params):
        table = pacsv.read_csv(
            pa.BufferReader(block),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=convert_options,
        )
        for batch in table.to_batches():
            arrays = [batch.column(i) for i in range(batch.num_columns)]
            arrays[3] = pc.cast(arrays[3], _TIMESTAMP)
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def batches(
    connection: Connection, selection: Selection, props: list[Column] | None
) -> Generator[pa.RecordBatch]:
    """The selection's raw batches, by the fastest reader the database has."""
    if connection.dialect.name == "postgresql":
        return copy_batches(connection, selection, props)
    return row_batches(connection, selection, props)
