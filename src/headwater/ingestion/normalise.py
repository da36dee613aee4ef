"""Normalisation (contract section 6): pure functions, applied to a record before validation.

`compile_normaliser(schema, options)` reads the schema once and answers a function from
a record to a new, normalised record; the input is never changed. Steps, in this order:

1. field mapping (top-level): a source member is renamed to its schema field, unless the
   record already has that field (then the source member is left as it is);
2. strings are trimmed of surrounding whitespace, everywhere in the record (`trim_strings`);
3. lossless type coercion, where the schema names a field's `type` and does not allow
   `string` (`coerce_types`): `"42"` → 42, `"4.5"` → 4.5, `"true"`/`"false"` (any case)
   → true/false, `""` → the member is dropped; for a field that is only `string`, an
   integer or a finite number becomes its decimal text. Anything else is left alone
   for validation to report;
4. values of `format: date-time` fields with a UTC offset become UTC ISO 8601 with
   milliseconds and `Z` (sub-millisecond digits are cut); values without an offset are
   left alone, so validation refuses them;
5. the schema's `default` fills a field that is absent;
6. members the schema does not name are dropped (`drop_unknown_fields`), in every object
   whose schema lists `properties` and neither `patternProperties` nor an
   `additionalProperties` schema.

Steps 3-6 follow `properties` and `items` (one schema for every item) down into nested
objects and arrays; `$ref`, `allOf`, `anyOf` and `oneOf` are not followed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from itertools import compress, count, repeat
from operator import is_, itemgetter, ne
from typing import Any

import orjson

from headwater.kit.strictjson import INT_MAX, INT_MIN

Record = dict[str, Any]

_ABSENT: Any = object()
_INTEGER = re.compile(r"[+-]?\d{1,20}")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_COERCED = ("integer", "number", "boolean")
_SCALARS = frozenset({int, float, bool, type(None)})


@dataclass(frozen=True, slots=True)
class Options:
    """The normalisation part of a dataset's options."""

    trim_strings: bool = True
    coerce_types: bool = False
    drop_unknown_fields: bool = False
    field_map: Mapping[str, str] = field(default_factory=dict)
    # files (every channel): an empty cell of a string field that "" could never pass
    # (one with `format`, `pattern` or `minLength`) is an absent member
    empty_cells_absent: bool = False


@dataclass(frozen=True, slots=True)
class _Field:
    types: frozenset[str]
    date_time: bool
    blank_absent: bool  # a string field that "" cannot pass: format, pattern or minLength
    default: Any
    shape: _Object | None
    items: _Field | None


@dataclass(frozen=True, slots=True)
class _Object:
    fields: dict[str, _Field]
    closed: bool
    defaulted: tuple[str, ...]


def _types(schema: Mapping[str, Any]) -> frozenset[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset([declared])
    if isinstance(declared, list):
        return frozenset(t for t in declared if isinstance(t, str))
    return frozenset()


def _compile_object(schema: Mapping[str, Any]) -> _Object | None:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    extra = schema.get("additionalProperties")
    closed = "patternProperties" not in schema and not isinstance(extra, dict)
    fields = {
        name: _compile_field(sub) for name, sub in properties.items() if isinstance(sub, dict)
    }
    defaulted = tuple(name for name, rule in fields.items() if rule.default is not _ABSENT)
    return _Object(fields=fields, closed=closed, defaulted=defaulted)


def _compile_field(schema: Mapping[str, Any]) -> _Field:
    items = schema.get("items")
    return _Field(
        types=_types(schema),
        date_time=schema.get("format") == "date-time",
        blank_absent="string" in _types(schema)
        and ("format" in schema or "pattern" in schema or schema.get("minLength", 0) != 0),
        default=schema.get("default", _ABSENT),
        shape=_compile_object(schema),
        items=_compile_field(items) if isinstance(items, dict) else None,
    )


def coerce_value(value: Any, types: frozenset[str]) -> Any:
    """`value` as the type the schema names, when that loses nothing; `_ABSENT` for `""`."""
    if not types:
        return value
    if isinstance(value, str):
        if "string" in types:
            return value
        if value == "":
            return _ABSENT
        if "integer" in types and _INTEGER.fullmatch(value):
            number = int(value)
            return number if INT_MIN <= number <= INT_MAX else value
        if "number" in types and _NUMBER.fullmatch(value):
            return _number(value)
        if "boolean" in types and value.lower() in ("true", "false"):
            return value.lower() == "true"
        return value
    if types == {"string"} and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value) if isinstance(value, int) else repr(value)
    return value


def _number(text: str) -> Any:
    """An int for an integer literal; a float only when it keeps every digit of `text`."""
    if _INTEGER.fullmatch(text):
        number = int(text)
        return number if INT_MIN <= number <= INT_MAX else text
    value = float(text)
    if repr(value) == text:  # the common case: the shortest repr is the text itself
        return value
    try:
        exact = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        return text
    if value != value or value in (float("inf"), float("-inf")):
        return text
    return value if Decimal(repr(value)) == exact else text


def utc_ms(value: str) -> str:
    """An ISO 8601 date-time with an offset, as UTC with milliseconds and `Z`; else as is."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    if parsed.tzinfo is None:
        return value
    if not parsed.utcoffset() and _UTC_SECONDS.fullmatch(value):
        return value[:19] + ".000Z"  # already UTC, to the second: the common case
    if parsed.utcoffset():
        parsed = parsed.astimezone(UTC)
    # "YYYY-MM-DDTHH:MM:SS.mmm+00:00": the first 23 characters, then Z
    return parsed.isoformat(timespec="milliseconds")[:23] + "Z"


def _trim(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return {k: _trim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trim(v) for v in value]
    return value


_UTC_SECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_CANONICAL_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _plain(text: bytes) -> bool:
    """Whether compact JSON text (orjson's) is one that trimming leaves as it is: ASCII,
    without escapes (which rules out every whitespace but the space), and no string
    starting or ending with a space."""
    return text.isascii() and b"\\" not in text and not _edge_space(text)


def _edge_space(text: bytes) -> bool:
    """Whether a space stands next to a quote in compact JSON text (orjson's, without
    escapes): where some string starts or ends with one.

    `in` tests for the two pairs cost 0.7 ms over a 500-record batch (quotes are
    everywhere, so the search can seldom skip ahead); a regex that jumps from space to
    space and looks at its neighbours costs 0.13 ms where spaces are few (a loop of
    `find` in Python cost 0.31). Where they are many, the `in` tests are cheaper.
    """
    if text.count(b" ", 0, _SAMPLE) > min(len(text), _SAMPLE) >> 6:  # dense, by a sample
        return b'" ' in text or b' "' in text
    return _SPACE_BY_QUOTE.search(text) is not None


_SAMPLE = 1 << 16


_SPACE_BY_QUOTE = re.compile(rb' (?<=" )| (?=")')


# Records from which `_all_canonical_dates` checks a column at a time: one record took
# 0.86 µs that way against 0.45 µs record by record; the two cost the same at 6-8.
_COLUMNS_FROM = 8


class Normaliser:
    """One schema and options, read once; `__call__` normalises one record.

    One pass over each record: this runs for every record pushed, so the common cases
    (a string, a number already of its type) take the fewest steps. `with_json` skips
    even that for a record that normalising would leave as it is.
    """

    __slots__ = (
        "coerce",
        "columns",
        "dates",
        "drop",
        "empty_absent",
        "field_map",
        "item_texts",
        "root",
        "shortcut",
        "texts",
        "trim",
    )

    def __init__(self, root: _Object | None, options: Options) -> None:
        self.root = root
        self.trim = options.trim_strings
        self.coerce = options.coerce_types
        self.empty_absent = options.empty_cells_absent
        self.drop = options.drop_unknown_fields
        self.field_map = dict(options.field_map)
        # per object shape, per field: what a text value becomes (CSV values are all text)
        self.texts: dict[int, dict[str, Callable[[str], Any]]] = {}
        # per `items` rule: what a text item becomes
        self.item_texts: dict[int, Callable[[str], Any]] = {}
        self._index(root)
        # `table`: what each top-level field's column of text values becomes
        self.columns: dict[str, Callable[[list[str]], list[Any]]] = {
            name: _column_rule(
                rule,
                self.texts[id(root)][name],
                trim=self.trim,
                coerce=self.coerce,
                empty_absent=self.empty_absent,
            )
            for name, rule in (root.fields.items() if root else ())
        }
        # `with_json`: a record can come back as it is when only trimming and top-level
        # date-times could change it (no coercion, dropping, renaming or defaults)
        self.dates = tuple(
            name for name, rule in (root.fields.items() if root else ()) if rule.date_time
        )
        self.shortcut = not (self.coerce or self.drop or self.field_map) and _only_top_dates(
            root, top=True
        )

    def _index(self, shape: _Object | None) -> None:
        if shape is None or id(shape) in self.texts:
            return
        self.texts[id(shape)] = {name: self._text(rule) for name, rule in shape.fields.items()}
        for rule in shape.fields.values():
            self._index(rule.shape)
            item = rule.items
            while item is not None:
                self.item_texts[id(item)] = self._text(item)
                self._index(item.shape)
                item = item.items

    def _text(self, rule: _Field) -> Callable[[str], Any]:
        """What a text value of this field becomes (`_text_rule`, with a file's empty
        cell of a field that "" cannot pass made nothing: `empty_cells_absent`)."""
        return _text_rule(rule, trim=self.trim, coerce=self.coerce, empty_absent=self.empty_absent)

    def with_json(self, record: Record) -> tuple[Record, str | None]:
        """`self(record)`, and the record's JSON text when normalising leaves it as it is:
        then the record itself comes back (not changed, and not copied either).

        orjson writes no whitespace between tokens, so in its text a quote stands next to
        a space only where a string starts or ends with one; ASCII without escapes rules
        out every other whitespace that trimming removes. The top-level date-times must
        already be UTC with milliseconds. The text is what storing the record needs.
        """
        if not self.shortcut:
            return self(record), None
        return self._kept(record, orjson.dumps(record))

    def each_with_json(self, records: list[Record]) -> tuple[list[Record], list[str | None]]:
        """`with_json` of each record: the records normalised, and their JSON texts.

        A batch is checked as one text where it can be: each record written (orjson, at
        C speed), the texts joined by newlines and `with_json`'s tests run once on the
        whole, then split again. orjson escapes every newline inside a string, and the
        tests rule out escapes, so the newlines are exactly the joins. Only when some
        record fails is each one taken on its own (with the text already written).
        """
        if not self.shortcut:
            return list(map(self, records)), [None] * len(records)
        texts = list(map(orjson.dumps, records))
        joined = b"\n".join(texts)
        if _plain(joined) and self._all_canonical_dates(records):
            return records, joined.decode().split("\n")  # type: ignore[return-value]
        kept = list(map(self._kept, records, texts))
        return [record for record, _ in kept], [text for _, text in kept]

    def _kept(self, record: Record, text: bytes) -> tuple[Record, str | None]:
        """`with_json` of a record whose orjson text is `text` (the shortcut applies)."""
        if _plain(text) and self._canonical_dates(record):
            return record, text.decode()
        return self(record), None

    def _all_canonical_dates(self, records: list[Record]) -> bool:
        """`_canonical_dates` of every record: a column at a time (C-speed steps) where
        each record holds each date-time as a string, record by record otherwise (and
        for fewer than `_COLUMNS_FROM` records, where the column's set-up costs more)."""
        if len(records) < _COLUMNS_FROM:
            return all(map(self._canonical_dates, records))
        for name in self.dates:
            values: list[Any] = list(map(dict.get, records, repeat(name)))
            if set(map(type, values)) != {str}:
                return all(map(self._canonical_dates, records))
            if not all(map(_CANONICAL_UTC.fullmatch, values)):
                return False
        return True

    def _canonical_dates(self, record: Record) -> bool:
        """Whether each top-level date-time of the record that is a string is already UTC
        with milliseconds."""
        for name in self.dates:
            value = record.get(name)
            if type(value) is str and not _CANONICAL_UTC.fullmatch(value):
                return False
        return True

    def table(self, names: Sequence[str], rows: Sequence[Sequence[str]]) -> list[Record]:
        """The records of rows of text values under one header (a CSV file's), normalised:
        `[self(dict(zip(names, row))) for row in rows]`, made a column at a time.

        Each column goes through its field's `_column_rule`, which takes C-speed steps
        over the whole column where its values allow; the records are made at the end,
        members in the order the row-at-a-time path gives them. A second implementation
        of the same rules, kept because it pays: 1.98x the row path on a 10-column CSV
        (`bench/normalise.py`, which checks the two agree; docs/benchmarks/history/2026-11.md).
        """
        root = self.root
        if root is None or not rows:
            return [self(dict(zip(names, row, strict=True))) for row in rows]
        positions = dict(zip(names, range(len(names)), strict=True))
        if self.field_map:
            positions = _map_fields(positions, self.field_map)
        drop = self.drop and root.closed
        unnamed = _strip_all if self.trim else list
        out_names: list[str] = []
        columns: list[list[Any]] = []
        for name, position in positions.items():
            rule = self.columns.get(name)
            if rule is None and drop:
                continue
            out_names.append(name)
            columns.append((rule or unnamed)(list(map(itemgetter(position), rows))))
        if columns:
            records = list(map(dict, map(zip, repeat(out_names), zip(*columns, strict=True))))
        else:  # every column dropped
            records = [{} for _ in rows]
        for name, column in zip(out_names, columns, strict=True):
            if _ABSENT in column:
                for index in compress(count(), map(is_, column, repeat(_ABSENT))):
                    del records[index][name]
        for name in root.defaulted:
            default = root.fields[name].default
            for record in records:
                if name not in record:
                    record[name] = copy.deepcopy(default)
        return records

    def __call__(self, record: Record) -> Record:
        if self.field_map:
            record = _map_fields(record, self.field_map)
        if self.root is None:
            return _trim(record) if self.trim else dict(record)
        return self._object(record, self.root)

    def _value(self, value: Any, rule: _Field) -> Any:
        kind = type(value)
        if kind is str:
            if self.trim:
                value = value.strip()
            if value == "" and self.empty_absent and rule.blank_absent:
                return _ABSENT
            if self.coerce and rule.types and "string" not in rule.types:
                value = coerce_value(value, rule.types)
                if type(value) is not str:
                    return value
            if rule.date_time and not _CANONICAL_UTC.fullmatch(value):
                return utc_ms(value)
            return value
        if kind is dict:
            if rule.shape is not None:
                return self._object(value, rule.shape)
            return _trim(value) if self.trim else value
        if kind is list:
            items = rule.items
            if items is not None:
                text = self.item_texts[id(items)]
                values = [
                    text(item) if type(item) is str else self._value(item, items) for item in value
                ]
                # only coercion and empty cells drop a value (an empty text)
                dropping = self.coerce or self.empty_absent
                return [v for v in values if v is not _ABSENT] if dropping else values
            return _trim(value) if self.trim else value
        if self.coerce and rule.types:
            return coerce_value(value, rule.types)
        return value

    def _object(self, obj: Mapping[str, Any], shape: _Object) -> dict[str, Any]:
        drop = self.drop and shape.closed
        trim = self.trim
        as_is = not self.coerce  # numbers, booleans and null stay as they are
        fields = shape.fields
        texts = self.texts[id(shape)]
        out: dict[str, Any] = {}
        for name, value in obj.items():
            kind = type(value)
            if kind is str:
                text = texts.get(name)
                if text is not None:
                    normalised = text(value)
                    if normalised is not _ABSENT:
                        out[name] = normalised
                    continue
            elif as_is and kind in _SCALARS:
                if not drop or name in fields:
                    out[name] = value
                continue
            rule = fields.get(name)
            if rule is None:
                if not drop:
                    out[name] = _trim(value) if trim else value
                continue
            normalised = self._value(value, rule)
            if normalised is not _ABSENT:
                out[name] = normalised
        for name in shape.defaulted:
            if name not in out:
                out[name] = copy.deepcopy(fields[name].default)
        return out


def _only_top_dates(shape: _Object | None, *, top: bool) -> bool:
    """No defaults anywhere in `shape`, and date-time fields only at its top level."""
    if shape is None:
        return True
    if shape.defaulted:
        return False
    for rule in shape.fields.values():
        if rule.date_time and not top:
            return False
        if not _only_top_dates(rule.shape, top=False):
            return False
        item = rule.items
        while item is not None:
            if item.date_time or not _only_top_dates(item.shape, top=False):
                return False
            item = item.items
    return True


def _same(value: str) -> str:
    return value


def _text_kind(rule: _Field, *, trim: bool, coerce: bool, empty_absent: bool) -> str:
    """Which of `_text_rule`'s functions a field's text values take (and, the same,
    which of `_column_rule`'s its columns take)."""
    types, date_time = rule.types, rule.date_time
    if empty_absent and rule.blank_absent:  # a string field, so never coerced
        return "present"
    if not (coerce and types and "string" not in types):
        if date_time:
            return "date_time"
        return "strip" if trim else "same"
    if types == {"number"} and not date_time:
        return "number"
    if types == {"integer"} and not date_time:
        return "integer"
    if types == {"boolean"} and not date_time:
        return "boolean"
    return "typed"


def _text_rule(
    rule: _Field, *, trim: bool, coerce: bool, empty_absent: bool = False
) -> Callable[[str], Any]:
    """What `Normaliser._value` does to a text value of this field, as one function made
    for the field's type: the same result, with fewer steps per value."""
    types, date_time = rule.types, rule.date_time
    kind = _text_kind(rule, trim=trim, coerce=coerce, empty_absent=empty_absent)
    if kind == "present":

        def absent_when_empty(value: str) -> Any:
            if trim:
                value = value.strip()
            if value == "":
                return _ABSENT
            if date_time and not _CANONICAL_UTC.fullmatch(value):
                return utc_ms(value)
            return value

        return absent_when_empty
    if kind in ("strip", "same"):
        return str.strip if trim else _same
    if kind == "date_time":

        def as_date_time(value: str) -> str:
            if trim:
                value = value.strip()
            return value if _CANONICAL_UTC.fullmatch(value) else utc_ms(value)

        return as_date_time
    if kind == "number":

        def as_number(value: str) -> Any:
            if trim:
                value = value.strip()
            if value == "":
                return _ABSENT
            return _number(value) if _NUMBER.fullmatch(value) else value

        return as_number
    if kind == "integer":

        def as_integer(value: str) -> Any:
            if trim:
                value = value.strip()
            if value == "":
                return _ABSENT
            if _INTEGER.fullmatch(value):
                number = int(value)
                return number if INT_MIN <= number <= INT_MAX else value
            return value

        return as_integer

    def as_typed(value: str) -> Any:
        if trim:
            value = value.strip()
        typed = coerce_value(value, types)
        if type(typed) is not str:
            return typed
        if date_time and not _CANONICAL_UTC.fullmatch(typed):
            return utc_ms(typed)
        return typed

    return as_typed


# --- columns: `_text_rule` over a whole column ----------------------------------------

Column = Callable[[list[str]], list[Any]]


def _strip_all(values: list[str]) -> list[str]:
    return list(map(str.strip, values))


_BOOLEAN_TEXTS: dict[str, Any] = {"true": True, "false": False, "": _ABSENT}


def _column_rule(
    rule: _Field, text: Callable[[str], Any], *, trim: bool, coerce: bool, empty_absent: bool
) -> Column:
    """What `text` (the field's `_text_rule`) does to each value, done to a whole column.

    Where every value is of the common kind (numbers of a number field, ...), the work
    is C-speed steps over the column (`map` of C functions, `in`, comparing lists);
    otherwise `text` runs on each value. The results are `text`'s, value for value
    (`tests/unit/test_normalise.py` checks it against the row-at-a-time path).
    """

    def each(values: list[str]) -> list[Any]:
        return list(map(text, values))

    def stripped(values: list[str]) -> list[str]:
        return _strip_all(values) if trim else values

    kind = _text_kind(rule, trim=trim, coerce=coerce, empty_absent=empty_absent)
    if kind == "strip":
        return _strip_all
    if kind == "same":
        return list
    if kind == "present":

        def present(values: list[str]) -> list[Any]:
            kept = stripped(values)
            if "" in kept:
                return each(values)
            return _utc_column(kept, each, values) if rule.date_time else kept

        return present
    if kind == "date_time":
        return lambda values: _utc_column(stripped(values), each, values)
    if kind == "number":
        return lambda values: _number_column(stripped(values), each, values)
    if kind == "integer":

        def integers(values: list[str]) -> list[Any]:
            kept = stripped(values)
            if all(map(_INTEGER.fullmatch, kept)):
                numbers = list(map(int, kept))
                if not numbers or (min(numbers) >= INT_MIN and max(numbers) <= INT_MAX):
                    return numbers
            return each(values)

        return integers
    if kind == "boolean":

        def booleans(values: list[str]) -> list[Any]:
            kept = stripped(values)
            return list(map(_BOOLEAN_TEXTS.get, map(str.lower, kept), kept))

        return booleans
    return each


def _utc_column(stripped: list[str], each: Column, values: list[str]) -> list[Any]:
    """A date-time column (stripped, none empty): as it is when every value is UTC
    with milliseconds, and with `.000` added when every value is a valid UTC date-time
    to the second; else `each` value on its own (`utc_ms`)."""
    if all(map(_CANONICAL_UTC.fullmatch, stripped)):
        return stripped
    if all(map(_UTC_SECONDS.fullmatch, stripped)):
        try:
            list(map(datetime.fromisoformat, stripped))
        except ValueError:
            return each(values)
        return [value[:19] + ".000Z" for value in stripped]
    return each(values)


def _number_column(stripped: list[str], each: Column, values: list[str]) -> list[Any]:
    """A number column: ints when every value is an integer literal in range; else
    floats, each value whose float does not print as its text taken by `_number`."""
    if "" in stripped or not all(map(_NUMBER.fullmatch, stripped)):
        return each(values)
    if all(map(_INTEGER.fullmatch, stripped)):
        numbers = list(map(int, stripped))
        if not numbers or (min(numbers) >= INT_MIN and max(numbers) <= INT_MAX):
            return numbers
    floats: list[Any] = list(map(float, stripped))
    for index in compress(count(), map(ne, map(repr, floats), stripped)):
        floats[index] = _number(stripped[index])
    return floats


def _map_fields(record: Record, field_map: Mapping[str, str]) -> Record:
    out = dict(record)
    for source, target in field_map.items():
        if source in out and target not in out:
            out[target] = out.pop(source)
    return out


def compile_normaliser(schema: Mapping[str, Any], options: Options) -> Normaliser:
    """A pure function normalising records for `schema` under `options`."""
    return Normaliser(_compile_object(schema), options)
