"""Normalisation: each step, their order, and properties that hold for every record."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.ingestion import normalise
from headwater.ingestion.normalise import Options, coerce_value, compile_normaliser, utc_ms

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "qty": {"type": "integer"},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "maybe-int": {"type": ["integer", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "zip_code": {"type": "string"},
        "channel": {"type": "string", "default": "web"},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "floor": {"type": "integer"}},
        },
        "free": {},
    },
}

COERCE = Options(coerce_types=True)


def run(record: dict[str, Any], options: Options = COERCE, schema: Any = SCHEMA) -> Any:
    return compile_normaliser(schema, options)(record)


@pytest.mark.parametrize(
    ("field", "given", "expected"),
    [
        ("qty", "42", 42),
        ("qty", "-7", -7),
        ("qty", "+3", 3),
        ("qty", "4.5", "4.5"),  # not an integer: left for validation to refuse
        ("qty", "9223372036854775808", "9223372036854775808"),  # beyond 64 bits
        ("price", "4.5", 4.5),
        ("price", "42", 42),
        ("price", "1e3", 1000.0),
        ("price", "0.10000000000000000001", "0.10000000000000000001"),  # would lose digits
        ("price", "abc", "abc"),
        ("paid", "true", True),
        ("paid", "FALSE", False),
        ("paid", "yes", "yes"),
        ("zip_code", 2100, "2100"),
        ("zip_code", 2.5, "2.5"),
        ("zip_code", True, True),
        ("note", "42", "42"),  # string allowed: never coerced
        ("maybe-int", "7", 7),
        ("free", "42", "42"),  # no type named: never coerced
    ],
)
def test_coercion(field: str, given: Any, expected: Any) -> None:
    out = run({field: given})
    assert out[field] == expected
    assert type(out[field]) is type(expected)


@pytest.mark.parametrize("field", ["qty", "price", "paid", "maybe-int"])
def test_empty_string_becomes_absent_for_non_string_fields(field: str) -> None:
    assert field not in run({field: ""})


def test_empty_string_stays_for_string_fields() -> None:
    assert run({"name": ""})["name"] == ""


def test_no_coercion_unless_asked() -> None:
    assert run({"qty": "42", "zip_code": 2100}, Options()) == {
        "qty": "42",
        "zip_code": 2100,
        "channel": "web",
    }


def test_trimming_everywhere_and_optional() -> None:
    record = {"name": "  Ann ", "address": {"street": " Main St\t"}, "list": [" a ", 1]}
    assert run(record, Options()) == {
        "name": "Ann",
        "address": {"street": "Main St"},
        "list": ["a", 1],
        "channel": "web",
    }
    assert run(record, Options(trim_strings=False))["name"] == "  Ann "


def test_trim_then_coerce() -> None:
    assert run({"qty": " 42 "})["qty"] == 42


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2024-01-02T03:04:05+02:00", "2024-01-02T01:04:05.000Z"),
        ("2024-01-02T03:04:05.123456Z", "2024-01-02T03:04:05.123Z"),
        ("2024-01-02T03:04:05.9999-05:30", "2024-01-02T08:34:05.999Z"),
        ("2024-01-02 03:04:05Z", "2024-01-02T03:04:05.000Z"),
        ("2024-01-02T03:04:05", "2024-01-02T03:04:05"),  # no offset: left for validation
        ("not a date", "not a date"),
    ],
)
def test_date_time_to_utc_milliseconds(given: str, expected: str) -> None:
    assert run({"at": given})["at"] == expected
    assert utc_ms(given) == expected


def test_date_time_only_for_date_time_fields() -> None:
    assert run({"name": "2024-01-02T03:04:05+02:00"})["name"] == "2024-01-02T03:04:05+02:00"


def test_field_map_renames_unless_target_present() -> None:
    options = Options(field_map={"e-mail": "name", "Qty": "qty"}, coerce_types=True)
    assert run({"e-mail": "a@b.c", "Qty": "3"}, options) == {
        "name": "a@b.c",
        "qty": 3,
        "channel": "web",
    }
    kept = run({"e-mail": "x", "name": "y"}, options)
    assert kept["name"] == "y"
    assert kept["e-mail"] == "x"


def test_defaults_fill_absent_fields_only() -> None:
    assert run({})["channel"] == "web"
    assert run({"channel": "shop"})["channel"] == "shop"
    assert run({"channel": None})["channel"] is None


def test_default_values_are_copied() -> None:
    schema = {"properties": {"tags": {"type": "array", "default": []}}}
    normalise = compile_normaliser(schema, Options())
    first = normalise({})
    first["tags"].append(1)
    assert normalise({})["tags"] == []


def test_drop_unknown_fields_at_every_declared_level() -> None:
    options = Options(drop_unknown_fields=True)
    record = {"name": "a", "extra": 1, "address": {"street": "s", "door": 3}, "free": {"x": 1}}
    assert run(record, options) == {
        "name": "a",
        "address": {"street": "s"},
        "free": {"x": 1},
        "channel": "web",
    }
    assert run(record, Options())["extra"] == 1


def test_drop_keeps_members_an_open_schema_describes() -> None:
    schema = {"properties": {"a": {}}, "additionalProperties": {"type": "string"}}
    assert run({"a": 1, "b": "x"}, Options(drop_unknown_fields=True), schema) == {
        "a": 1,
        "b": "x",
    }


def test_nested_and_array_items_are_coerced() -> None:
    out = run({"address": {"floor": "3"}, "tags": ["1", "2", ""]})
    assert out["address"] == {"floor": 3}
    assert out["tags"] == [1, 2]


def test_schema_without_properties_only_trims() -> None:
    assert run({"a": " x "}, COERCE, {"type": "object"}) == {"a": "x"}


def test_coerce_direct() -> None:
    assert coerce_value("5", frozenset()) == "5"
    assert coerce_value(None, frozenset({"integer"})) is None


# --- properties --------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=12)
records = st.dictionaries(
    st.sampled_from(["name", "qty", "price", "paid", "note", "at", "tags", "x-y", "z_z"]),
    scalars | st.lists(scalars, max_size=3),
    max_size=8,
)
options = st.builds(
    Options,
    trim_strings=st.booleans(),
    coerce_types=st.booleans(),
    drop_unknown_fields=st.booleans(),
)


@given(records, options)
def test_never_changes_its_input(record: dict[str, Any], opts: Options) -> None:
    before = copy.deepcopy(record)
    run(record, opts)
    assert record == before


@given(records, options)
def test_idempotent(record: dict[str, Any], opts: Options) -> None:
    once = run(record, opts)
    assert run(once, opts) == once


@given(records, options)
def test_deterministic(record: dict[str, Any], opts: Options) -> None:
    assert run(record, opts) == run(copy.deepcopy(record), opts)


@given(st.integers(-(2**63), 2**63 - 1))
def test_integer_text_round_trips(n: int) -> None:
    assert run({"qty": str(n)})["qty"] == n
    assert run({"price": str(n)})["price"] == n


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_text_round_trips(x: float) -> None:
    assert run({"price": repr(x)})["price"] == x


@given(st.text(max_size=20))
def test_trim_matches_str_strip(s: str) -> None:
    assert run({"name": s}, Options())["name"] == s.strip()


TYPE_SETS = [
    [],
    ["string"],
    ["integer"],
    ["number"],
    ["boolean"],
    ["integer", "null"],
    ["number", "string"],
    ["boolean", "integer"],
]
TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " 42 ", "-7", "4.5", "1e3", "TRUE", "false", "99999999999999999999"]),
    st.sampled_from(["2026-11-22T10:00:00+01:00", " 2026-11-22T09:00:00.000Z", "2026-11-22"]),
)


@given(
    types=st.sampled_from(TYPE_SETS),
    date_time=st.booleans(),
    trim=st.booleans(),
    coerce=st.booleans(),
    empty_absent=st.booleans(),
    min_length=st.booleans(),
    value=TEXTS,
)
def test_the_text_fast_path_matches_the_general_one(
    types: list[str],
    date_time: bool,
    trim: bool,
    coerce: bool,
    empty_absent: bool,
    min_length: bool,
    value: str,
) -> None:
    """Text values (every CSV value) take a per-field shortcut; it must change nothing,
    empty cells made absent included."""
    field: dict[str, Any] = {"type": types} if types else {}
    if date_time:
        field["format"] = "date-time"
    if min_length:
        field["minLength"] = 1
    schema = {"type": "object", "properties": {"f": field}}
    options = Options(trim_strings=trim, coerce_types=coerce, empty_cells_absent=empty_absent)
    compiled = compile_normaliser(schema, options)
    assert isinstance(compiled, normalise.Normaliser)
    assert compiled.root is not None
    rule = compiled.root.fields["f"]
    general = compiled._value(value, rule)
    fast = normalise._text_rule(rule, trim=trim, coerce=coerce, empty_absent=empty_absent)(value)
    assert fast is general or fast == general
    assert type(fast) is type(general)


# --- with_json: a record that normalising leaves as it is comes back as it is -------------

PLAIN_SCHEMA = copy.deepcopy(SCHEMA)
del PLAIN_SCHEMA["properties"]["channel"]["default"]
JSON_TEXTS = st.text(max_size=12) | st.sampled_from(
    ["a b", " a", "a ", "\u00a0a", "a\u3000", "é", "\t", 'say "hi"', "2026-11-22T09:00:00.000Z"]
)
plain_records = st.dictionaries(
    st.sampled_from(["name", "note", "at", "tags", "address", "x-y", "z_z"]),
    st.none()
    | st.integers(-5, 5)
    | JSON_TEXTS
    | st.lists(JSON_TEXTS, max_size=3)
    | st.fixed_dictionaries({}, optional={"street": JSON_TEXTS, "floor": st.integers(0, 9)}),
    max_size=7,
)


@given(plain_records, options)
def test_with_json_answers_as_the_normaliser(record: dict[str, Any], opts: Options) -> None:
    normaliser = compile_normaliser(PLAIN_SCHEMA, opts)
    before = copy.deepcopy(record)
    cleaned, text = normaliser.with_json(record)
    assert cleaned == normaliser(before)
    assert record == before
    if text is not None:
        assert cleaned is record
        assert orjson.loads(text) == record


# up to 12 records: date-times are checked record by record below
# normalise._COLUMNS_FROM (8) and a column at a time from there
@given(st.lists(plain_records, min_size=1, max_size=12), options)
def test_each_with_json_answers_as_with_json_record_by_record(
    records: list[dict[str, Any]], opts: Options
) -> None:
    normaliser = compile_normaliser(PLAIN_SCHEMA, opts)
    before = copy.deepcopy(records)
    cleaned, texts = normaliser.each_with_json(records)
    assert records == before
    assert cleaned == [normaliser(record) for record in copy.deepcopy(before)]
    assert len(texts) == len(records)
    for record, made, text in zip(records, cleaned, texts, strict=True):
        if text is not None:
            assert made is record
            assert orjson.loads(text) == record
    # the whole batch goes the quick way exactly when every record would on its own
    one_by_one = [normaliser.with_json(record)[1] for record in records]
    if all(text is not None for text in one_by_one):
        assert texts == one_by_one


DATE_TEXTS = st.sampled_from(
    [
        "2026-11-22T09:00:00.000Z",
        "2026-11-22T09:00:00Z",
        "2026-11-22T10:00:00+01:00",
        "2026-11-22T09:00:00.123Z",
        "not a date",
    ]
)


@given(
    st.lists(
        st.fixed_dictionaries({"at": DATE_TEXTS}, optional={"name": JSON_TEXTS}),
        min_size=1,
        max_size=20,
    )
)
def test_each_with_json_checks_date_times_a_column_at_a_time_as_record_by_record(
    records: list[dict[str, Any]],
) -> None:
    """Every record holds its date-time as a string: from normalise._COLUMNS_FROM records
    on, the date-times are checked a column at a time, and the answer is the same."""
    normaliser = compile_normaliser(PLAIN_SCHEMA, Options())
    before = copy.deepcopy(records)
    cleaned, texts = normaliser.each_with_json(records)
    assert cleaned == [normaliser(record) for record in copy.deepcopy(before)]
    assert texts == [normaliser.with_json(record)[1] for record in copy.deepcopy(before)]


@given(st.lists(st.sampled_from(["a", " ", "b c", '"', "x y z"]), max_size=30))
def test_edge_space_finds_a_space_beside_a_quote_however_many_spaces(parts: list[str]) -> None:
    text = "".join(parts).encode()
    assert normalise._edge_space(text) == (b'" ' in text or b' "' in text)


def test_each_with_json_takes_each_record_on_its_own_when_one_would_change() -> None:
    normaliser = compile_normaliser(PLAIN_SCHEMA, Options())
    plain = {"name": "a b", "note": "line"}
    for changed in ({"name": "a "}, {"at": "2026-11-22T10:00:00+01:00"}, {"note": "x\ny"}):
        cleaned, texts = normaliser.each_with_json([plain, changed, plain])
        assert cleaned[0] is plain and cleaned[2] is plain
        assert cleaned[1] == normaliser(changed)
        assert texts[0] == texts[2] == orjson.dumps(plain).decode()
        assert texts[1] is None  # an escape (the newline) is never taken as it is


def test_with_json_takes_the_shortcut_only_when_nothing_would_change() -> None:
    normaliser = compile_normaliser(PLAIN_SCHEMA, Options())
    plain = {"name": "a b", "at": "2026-11-22T09:00:00.000Z", "address": {"street": "x"}}
    cleaned, text = normaliser.with_json(plain)
    assert cleaned is plain and text == orjson.dumps(plain).decode()
    for changed in (
        {"name": "a "},
        {"address": {"street": " x"}},
        {"tags": ["x\u00a0"]},
        {"at": "2026-11-22T10:00:00+01:00"},
        {"free": {"deep": "x\n"}},
    ):
        cleaned, text = normaliser.with_json(changed)
        assert text is None and cleaned == normaliser(changed) != changed
    # a date-time below the top level, a default, coercion: never the shortcut
    nested_date = {
        "type": "object",
        "properties": {"o": {"type": "object", "properties": {"at": {"format": "date-time"}}}},
    }
    for schema, options in (
        (nested_date, Options()),
        (SCHEMA, Options()),
        (PLAIN_SCHEMA, Options(coerce_types=True)),
        (PLAIN_SCHEMA, Options(drop_unknown_fields=True)),
        (PLAIN_SCHEMA, Options(field_map={"n": "name"})),
    ):
        assert compile_normaliser(schema, options).with_json({"name": "x"})[1] is None


# --- table: rows of text under one header, a column at a time -----------------------------

TABLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "number"},
        "i": {"type": "integer"},
        "b": {"type": "boolean"},
        "s": {"type": "string"},
        "e": {"type": "string", "format": "email"},
        "at": {"type": "string", "format": "date-time"},
        "when": {"type": ["string", "null"], "format": "date-time", "minLength": 1},
        "mixed": {"type": ["integer", "boolean"]},
        "with_default": {"type": "integer", "default": 7},
        "free": {},
    },
    "additionalProperties": False,
}
COLUMN_TEXTS = {
    "numbers": st.sampled_from(["1.5", " 2.25 ", "10.10", "3", "-0.0", "1e3", "5.00", "0.1"]),
    "integers": st.sampled_from(["1", " -2 ", "+3", "0", "9223372036854775807", "12"]),
    "big": st.sampled_from(["9223372036854775808", "-9223372036854775809", "1"]),
    "booleans": st.sampled_from(["true", "FALSE", " True ", "false"]),
    "seconds": st.sampled_from(["2026-11-22T10:00:00Z", " 2026-01-31T23:59:59Z"]),
    "canonical": st.sampled_from(["2026-11-22T10:00:00.000Z", "2026-11-22T10:00:00.123Z"]),
    "bad dates": st.sampled_from(["2026-02-30T10:00:00Z", "2026-11-22T10:00:00+01:00"]),
    "anything": TEXTS | st.sampled_from(["nan", "inf", "1_000", "٣", "0x10", "1e400", " "]),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    pool = [*TABLE_SCHEMA["properties"], "unknown", "other"]
    names = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6, unique=True))
    height = draw(st.integers(1, 8))
    columns = []
    for _ in names:
        kind = draw(st.sampled_from(sorted(COLUMN_TEXTS)))
        texts = COLUMN_TEXTS[kind]
        if draw(st.booleans()):  # a column mostly of one kind, with odd values among them
            texts = texts | COLUMN_TEXTS["anything"]
        columns.append(draw(st.lists(texts, min_size=height, max_size=height)))
    return names, [list(row) for row in zip(*columns, strict=True)]


@given(
    table=tables(),
    trim=st.booleans(),
    coerce=st.booleans(),
    drop=st.booleans(),
    empty_absent=st.booleans(),
    field_map=st.sampled_from([{}, {"other": "i"}, {"unknown": "s", "s": "e"}]),
)
def test_a_table_normalises_as_its_rows_do_one_by_one(
    table: tuple[list[str], list[list[str]]],
    trim: bool,
    coerce: bool,
    drop: bool,
    empty_absent: bool,
    field_map: dict[str, str],
) -> None:
    names, rows = table
    options = Options(
        trim_strings=trim,
        coerce_types=coerce,
        drop_unknown_fields=drop,
        field_map=field_map,
        empty_cells_absent=empty_absent,
    )
    compiled = compile_normaliser(TABLE_SCHEMA, options)
    one_by_one = [compiled(dict(zip(names, row, strict=True))) for row in rows]
    # orjson's text tells 1 from 1.0 and True, and keeps member order
    assert orjson.dumps(compiled.table(names, rows)) == orjson.dumps(one_by_one)


def test_a_table_takes_each_column_at_c_speed_when_its_values_allow() -> None:
    compiled = compile_normaliser(TABLE_SCHEMA, Options(coerce_types=True, empty_cells_absent=True))
    names = ["n", "i", "b", "at", "s"]
    rows = [["10.10", "3", "TRUE", "2026-11-22T10:00:00Z", " x "], ["2.5", "-1", "false", "", ""]]
    assert compiled.table(names, rows) == [
        {
            "n": 10.1,
            "i": 3,
            "b": True,
            "at": "2026-11-22T10:00:00.000Z",
            "s": "x",
            "with_default": 7,
        },
        {"n": 2.5, "i": -1, "b": False, "s": "", "with_default": 7},  # "at": empty, so absent
    ]
    assert compiled.table(names, []) == []
    # past 64 bits an integer stays text (validation refuses it), in either kind of column
    big = [["9223372036854775808", "-9223372036854775809"], ["1", "2"]]
    assert compiled.table(["i", "n"], big) == [
        {"i": "9223372036854775808", "n": "-9223372036854775809", "with_default": 7},
        {"i": 1, "n": 2, "with_default": 7},
    ]
