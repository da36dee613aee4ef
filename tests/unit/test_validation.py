"""Draft-06 schema checks and record errors: paths, keywords, the 100-error cap."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.ingestion.validation import (
    DRAFT6,
    compile_batch,
    compile_schema,
    errors_of,
    pointer,
    schema_problems,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a-b": {"type": "integer"},
        "c_d": {"type": "object", "properties": {"x/y": {"type": "string"}}},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["a-b"],
    "additionalProperties": False,
}


def test_pointer_escapes() -> None:
    assert pointer(["a~b", "c/d", 0]) == "/a~0b/c~1d/0"
    assert pointer([]) == ""


def test_errors_have_pointer_keyword_message() -> None:
    validator = compile_schema(SCHEMA)
    errors = list(errors_of(validator, {"c_d": {"x/y": 1}, "when": "yesterday", "zz": 1}))
    by_path = {e["path"]: e for e in errors}
    assert by_path["/a-b"]["keyword"] == "required"
    assert by_path["/c_d/x~1y"]["keyword"] == "type"
    assert by_path["/when"]["keyword"] == "format"
    assert by_path["/zz"]["keyword"] == "additionalProperties"
    assert all(e["message"] for e in errors)


def test_draft6_rules_even_without_dollar_schema() -> None:
    # draft-04 style boolean exclusiveMaximum is invalid in draft-06; draft-06 uses a number
    validator = compile_schema({"type": "number", "exclusiveMaximum": 10})
    assert not validator.is_valid(10)
    assert validator.is_valid(9)


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ([], "must be a JSON object"),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "draft-07"),
        ({"$schema": "https://json-schema.org/draft/2020-12/schema"}, "2020-12"),
        ({"type": "strnig"}, "is not valid under any of the given schemas"),
        ({"required": "a"}, "is not of type 'array'"),
        ({"properties": {"a": {"pattern": "("}}}, "is not a 'regex'"),
        (
            {"type": "object", "properties": {"n": {"type": "integer"}}, "examples": [{"n": "x"}]},
            "example 0",
        ),
    ],
)
def test_schema_problems(schema: Any, says: str) -> None:
    problems = schema_problems(schema)
    assert problems, schema
    assert any(says in p["message"] for p in problems), problems


def test_examples_are_pointed_at() -> None:
    problems = schema_problems(
        {"properties": {"n": {"type": "integer"}}, "examples": [{"n": 1}, {"n": "x"}]}
    )
    assert [p["path"] for p in problems] == ["/examples/1/n"]


@pytest.mark.parametrize(
    "declared",
    [None, "http://json-schema.org/draft-06/schema#", "http://json-schema.org/draft-06/schema"],
)
def test_draft6_accepted(declared: str | None) -> None:
    schema: dict[str, Any] = dict(SCHEMA)
    if declared:
        schema["$schema"] = declared
    assert schema_problems(schema) == []


good = {"a-b": 1, "c_d": {"x/y": "s"}, "when": "2026-11-22T09:30:00.000Z"}
bad_cases = [
    {"c_d": {"x/y": "s"}},  # required
    {"a-b": "1"},  # type
    {"a-b": 1, "when": "yesterday"},  # format
    {"a-b": 1, "c_d": {"x/y": 5}},  # nested
    {"a-b": 1, "extra": True},  # additionalProperties
    7,  # not an object
]


@pytest.mark.parametrize("bad", bad_cases)
def test_the_batch_validator_answers_as_the_record_validator(bad: Any) -> None:
    validator, batch = compile_schema(SCHEMA), compile_batch({"$schema": DRAFT6, **SCHEMA})
    assert batch is not None
    assert batch.is_valid([good, good])
    records = [good, bad, good]
    assert not batch.is_valid(records)
    assert [validator.is_valid(r) for r in records] == [True, False, True]


def test_no_batch_validator_for_a_schema_with_references() -> None:
    with_ref = {
        "definitions": {"n": {"type": "integer"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/n"}},
    }
    assert compile_batch(with_ref) is None
