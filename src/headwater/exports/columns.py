"""An export's columns: the record's own four, then one per top-level property of the
dataset's schema versions, typed from those schemas.

A property's kind comes from its schema: `string` (with `format: date-time`:
`timestamp`), `integer`, `number`, `boolean`; anything else (objects, arrays, several
types, no type) is `json`, its value written as JSON text. `"null"` beside one type
does not change it. When versions disagree, `integer` and `number` make `number`, and
any other disagreement makes `json`. Property columns come in the order of their names
(PostgreSQL keeps schemas as JSONB, which does not keep the order members were written
in).

Rows are read as *raw* columns, every property as text (a string as itself, anything
else as its JSON text; absent or null is null), then `typed` casts whole columns at once
(Arrow compute). A value that the cast refuses (an integer written as `1.0`, an odd
date-time) is converted on its own; one that fits nowhere is null.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc

Kind = Literal["string", "timestamp", "integer", "number", "boolean", "json"]
META = ("record_id", "transaction_id", "schema_version", "ingested_at", "transform_version")
ARROW: Mapping[Kind, pa.DataType] = {
    "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
    "json": pa.string(),
}
META_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("transaction_id", pa.string()),
        ("schema_version", pa.int32()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
        ("transform_version", pa.int32()),
    ]
)


@dataclass(frozen=True, slots=True)
class Column:
    """A property's column: `name` in the file, `key` in the record."""

    name: str
    key: str
    kind: Kind


def _kind(schema: object) -> Kind:
    if not isinstance(schema, dict):
        return "json"
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared
    if not isinstance(types, list):
        return "json"
    types = [t for t in types if t != "null"]
    if len(types) != 1:
        return "json"
    match types[0]:
        case "string":
            return "timestamp" if schema.get("format") == "date-time" else "string"
        case "integer" | "number" | "boolean":
            return types[0]
    return "json"


def _merge(a: Kind, b: Kind) -> Kind:
    if a == b:
        return a
    if {a, b} == {"integer", "number"}:
        return "number"
    return "json"


def columns(schemas: Iterable[Mapping[str, Any]]) -> list[Column]:
    """The property columns of a dataset's schema versions."""
    kinds: dict[str, Kind] = {}
    for schema in schemas:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            continue
        for key, sub in properties.items():
            kind = _kind(sub)
            kinds[key] = _merge(kinds[key], kind) if key in kinds else kind
    # a property named like one of the record's own columns is prefixed, so neither hides
    return [
        Column(name=f"data.{key}" if key in META else key, key=key, kind=kind)
        for key, kind in sorted(kinds.items())
    ]


def raw_value(value: Any, kind: Kind) -> str | None:
    """A property's raw text (the portable reader's; PostgreSQL's reader makes the same)."""
    if value is None:
        return None
    if isinstance(value, str) and kind != "json":
        return value
    return orjson.dumps(value).decode()


def raw_schema(props: list[Column]) -> pa.Schema:
    return pa.schema(list(META_SCHEMA) + [pa.field(c.name, pa.string()) for c in props])


def typed_schema(props: list[Column]) -> pa.Schema:
    return pa.schema(list(META_SCHEMA) + [pa.field(c.name, ARROW[c.kind]) for c in props])


def _one(text: str, kind: Kind) -> Any:
    """One value the column cast refused, converted on its own (None if it cannot be)."""
    try:
        match kind:
            case "integer":
                number = float(text)
                return int(number) if number.is_integer() else None
            case "number":
                return float(text)
            case "boolean":
                return {"true": True, "false": False}.get(text)
            case "timestamp":
                parsed = datetime.fromisoformat(text)
                aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
                return aware.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return text


def _cast(column: pa.Array, kind: Kind) -> pa.Array:
    target = ARROW[kind]
    if target == pa.string():
        return column
    try:
        return pc.cast(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([None if v is None else _one(v, kind) for v in column.to_pylist()], target)


def typed(batch: pa.RecordBatch, props: list[Column]) -> pa.RecordBatch:
    """A raw batch with each property column cast to its kind's type."""
    arrays = [batch.column(i) for i in range(len(META))]
    arrays += [_cast(batch.column(len(META) + i), c.kind) for i, c in enumerate(props)]
    return pa.RecordBatch.from_arrays(arrays, schema=typed_schema(props))
