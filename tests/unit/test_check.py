"""The core's one record check (`ingestion.check`): the same rules, errors and cap for a
push's batch, a single record and a block of CSV rows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from headwater.ingestion import check, transforms
from headwater.ingestion.compiling import Compiled
from headwater.ingestion.normalise import compile_normaliser
from headwater.ingestion.schemas import DatasetOptions
from headwater.ingestion.validation import DRAFT6, compile_batch, compile_schema

SCHEMA: dict[str, Any] = {
    "$schema": DRAFT6,
    "type": "object",
    "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["id"],
}


def compiled(*, batch: bool = True, coerce: bool | None = None) -> Compiled:
    options = DatasetOptions.model_validate({}).normalisation(coerce=coerce)
    return Compiled(
        validator=compile_schema(SCHEMA),
        batch=compile_batch(SCHEMA) if batch else None,
        normaliser=compile_normaliser(SCHEMA, options),
    )


def test_every_error_is_counted_and_the_first_100_listed() -> None:
    records = [{"n": 1} for _ in range(150)]  # each misses `id`
    _, _, errors = check.batch(compiled(), records)
    assert (errors.count, errors.records, len(errors.listed)) == (150, 150, 100)
    assert errors.listed[99] == {
        "record": 99,
        "path": "/id",
        "keyword": "required",
        "message": errors.listed[99]["message"],
    }
    _, _, none = check.batch(compiled(), [{"id": "a"}])
    assert (none.count, none.records, none.listed) == (0, 0, [])


@pytest.mark.parametrize("batch", [True, False])
def test_a_batch_is_checked_as_each_record_is(batch: bool) -> None:
    records = [{"id": "a"}, {"id": 5}, {"n": "x"}, {"id": "b", "n": 2}]
    _, _, errors = check.batch(compiled(batch=batch), records)
    one_by_one = check.Errors()
    for index, record in enumerate(records):
        _, found = check.one(compiled(batch=batch), record)
        if found:
            one_by_one.add(index, found)
    assert errors.listed == one_by_one.listed
    assert (errors.count, errors.records) == (one_by_one.count, 2)


def test_a_nul_is_one_error_with_one_message_wherever_it_comes_from() -> None:
    """A push and a file's row say the same of U+0000: where it is, escaped."""
    record = {"id": "a\x00b", "n\x00": 1}
    _, _, pushed = check.batch(compiled(), [record], nul=True)
    _, from_file = check.one(compiled(), record, nul=True)
    assert pushed.listed == [{"record": 0, **error} for error in from_file]
    assert {error["keyword"] for error in from_file} >= {"characters"}
    paths = {error["path"] for error in from_file if error["keyword"] == "characters"}
    assert paths == {"/id", "/n\\u0000"}
    assert all("\x00" not in value for error in from_file for value in error.values())


def test_a_table_answers_the_rows_that_fail_by_index() -> None:
    header = ["id", "n"]
    rows = [["a", "1"], ["b", "x"], ["c", "3"]]
    cleaned, failed = check.table(compiled(coerce=True), header, rows)
    assert cleaned[0] == {"id": "a", "n": 1}
    assert [index for index, _ in failed] == [1]
    assert failed[0][1][0]["path"] == "/n"


def test_a_failure_about_the_whole_input_is_listed_first() -> None:
    errors = check.Errors()
    for index in range(100):
        errors.add(index, [{"path": "", "keyword": "type", "message": "m"}], line=index + 2)
    errors.first({"record": 100, "line": 102, "path": "", "keyword": "file", "message": "cut"})
    assert errors.count == 101 and len(errors.listed) == 100
    assert errors.listed[0]["keyword"] == "file" and errors.listed[1]["line"] == 2


@pytest.mark.parametrize(
    ("steps", "known"),
    [
        ([{"op": "dedupe", "keys": ["/id"]}, {"op": "filter", "path": "/n", "equals": 9}], True),
        ([{"op": "dedupe", "keys": ["/id"]}, {"op": "set", "path": "/n", "value": 1}], False),
    ],
)
def test_records_kept_as_they_came_keep_their_json_texts(
    steps: list[dict[str, Any]], known: bool
) -> None:
    records = [{"id": "a", "n": 1}, {"id": "a", "n": 2}, {"id": "b", "n": 9}, {"id": "c"}]
    texts = ['{"id":"a","n":1}', None, '{"id":"b","n":9}', '{"id":"c"}']
    with_steps = replace(compiled(), steps=transforms.compile_steps(1, steps, b"k" * 32))
    kept = check.transform(with_steps, records, texts)
    if known:  # the repeat of "a" and the filtered "b" go with their texts
        assert kept.records == [records[0], records[3]]
        assert kept.texts == ['{"id":"a","n":1}', '{"id":"c"}']
    else:
        assert kept.records == [{"id": "a", "n": 1}, {"id": "b", "n": 1}, {"id": "c", "n": 1}]
        assert kept.texts is None
    assert (kept.duplicates, kept.filtered) == (1, 1 if known else 0)
    assert records[0] == {"id": "a", "n": 1}  # the records given are left as they were
