"""Writing an export's raw batches (`reading`) as Parquet, CSV or NDJSON to a store's
writer, a batch at a time: memory holds at most one Parquet row group."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from headwater.exports.columns import Column, raw_schema, typed, typed_schema
from headwater.files.stores import Writer
from headwater.ingestion.feed import record_json

Format = Literal["parquet", "ndjson", "csv"]
FORMATS: tuple[str, ...] = Format.__args__  # type: ignore[attr-defined]


class _Out(io.RawIOBase):
    """A store's writer as a binary file (what Arrow's writers take)."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._writer.write(chunk)
        self._position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._position


def write(
    batches: Iterable[pa.RecordBatch],
    *,
    format: Format,
    props: list[Column],
    writer: Writer,
    row_group_rows: int,
    escape_formulas: bool = True,
) -> int:
    """Write every batch; the number of records written. The writer is left open (the
    caller commits or discards it)."""
    out = _Out(writer)
    match format:
        case "parquet":
            return _parquet(batches, props, out, row_group_rows)
        case "csv":
            return _csv(batches, props, out, escape_formulas=escape_formulas)
        case "ndjson":
            return _ndjson(batches, out)


def _parquet(
    batches: Iterable[pa.RecordBatch], props: list[Column], out: _Out, row_group_rows: int
) -> int:
    count = 0
    held: list[pa.RecordBatch] = []
    held_rows = 0
    with pq.ParquetWriter(out, typed_schema(props)) as parquet:
        for batch in batches:
            held.append(typed(batch, props))
            held_rows += batch.num_rows
            count += batch.num_rows
            if held_rows >= row_group_rows:
                parquet.write_table(pa.Table.from_batches(held), row_group_size=row_group_rows)
                held, held_rows = [], 0
        if held:
            parquet.write_table(pa.Table.from_batches(held), row_group_size=row_group_rows)
    return count


def _iso(column: pa.Array) -> pa.Array:
    """Timestamps as the API writes them: ISO 8601, milliseconds, `Z`."""
    milliseconds = pc.cast(column, pa.timestamp("ms", tz="UTC"))
    return pc.strftime(milliseconds, format="%Y-%m-%dT%H:%M:%SZ")


# what a spreadsheet takes for the start of a formula (OWASP's CSV injection list)
FORMULA_START = r"^[=+\-@\t\r]"


def _escaped(column: pa.Array) -> pa.Array:
    """A text column whose formula-like cells begin with `'` (contract 14)."""
    formula = pc.fill_null(pc.match_substring_regex(column, FORMULA_START), False)
    if not pc.any(formula).as_py():
        return column
    quoted = pc.binary_join_element_wise(pa.scalar("'"), column, "")
    return pc.if_else(formula, quoted, column)


def _csv(
    batches: Iterable[pa.RecordBatch], props: list[Column], out: _Out, *, escape_formulas: bool
) -> int:
    """Values as sent (each property's raw text), the record's time as the API writes it;
    text cells that a spreadsheet would run as a formula escaped unless `escape_formulas`
    is off. No records: the header alone."""
    count = 0
    schema = raw_schema(props).set(3, pa.field("ingested_at", pa.string()))
    first = len(schema) - len(props)
    text = [first + i for i, c in enumerate(props) if c.kind not in ("integer", "number")]
    with pacsv.CSVWriter(out, schema) as writer:
        for batch in batches:
            arrays = [batch.column(i) for i in range(batch.num_columns)]
            arrays[3] = _iso(arrays[3])
            if escape_formulas:
                for i in text:
                    arrays[i] = _escaped(arrays[i])
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
            count += batch.num_rows
    return count


def _line(text: str) -> str:
    """A record's JSON text on one line (stored texts are compact; this makes sure)."""
    return text if "\n" not in text else orjson.dumps(orjson.loads(text)).decode()


def _ndjson(batches: Iterable[pa.RecordBatch], out: _Out) -> int:
    """One line a record, as `GET /platform/v1/data` streams them."""
    count = 0
    for batch in batches:
        ids, transactions, versions = (batch.column(i).to_pylist() for i in range(3))
        times = _iso(batch.column(3)).to_pylist()
        steps = batch.column(4).to_pylist()
        texts = batch.column(5).to_pylist()
        lines = [
            record_json(r, t, v, s, at, _line(d)) + "\n"
            for r, t, v, s, at, d in zip(
                ids, transactions, versions, steps, times, texts, strict=True
            )
        ]
        out.write("".join(lines).encode())
        count += batch.num_rows
    return count
