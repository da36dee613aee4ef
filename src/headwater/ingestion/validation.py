"""Draft-06 schemas: checking a schema before it is registered, and validating records.

Records are validated by jsonschema-rs (chosen by `bench/validate.py`): a compiled
validator answers `is_valid` for a good record without building any error, and lists
every error with its path for a bad one. It is always the draft-06 validator, whatever
`$schema` says or omits. Schemas are checked against the draft-06 meta-schema with the
reference implementation (`jsonschema`), which lists every problem, not the first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema_rs
import orjson

DRAFT6 = "http://json-schema.org/draft-06/schema#"
DRAFT6_IDS = frozenset({DRAFT6, DRAFT6.rstrip("#")})
MAX_LISTED_ERRORS = 100

Validator = jsonschema_rs.Draft6Validator

_meta = jsonschema.Draft6Validator(
    jsonschema.Draft6Validator.META_SCHEMA, format_checker=jsonschema.FormatChecker()
)


def pointer(parts: Iterable[str | int]) -> str:
    """A JSON Pointer (RFC 6901) to the given path."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def schema_problems(schema: Any) -> list[dict[str, str]]:
    """Why `schema` cannot be registered: not an object, another draft, not valid draft-06,
    or an item of its `examples` that fails it. Empty when it can be."""
    if not isinstance(schema, dict):
        return [{"path": "", "message": "a schema must be a JSON object"}]
    declared = schema.get("$schema")
    if declared is not None and declared not in DRAFT6_IDS:
        return [
            {
                "path": "/$schema",
                "message": f"{declared!r} is not draft-06; schemas must use {DRAFT6}",
            }
        ]
    problems = [
        {"path": pointer(e.absolute_path), "message": e.message}
        for e in sorted(_meta.iter_errors(schema), key=lambda e: list(map(str, e.path)))
    ]
    if problems:
        return problems
    try:
        validator = compile_schema(schema)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        return [{"path": "", "message": str(exc).splitlines()[0]}]
    examples = schema.get("examples", [])
    if not isinstance(examples, list):
        return []
    return [
        {"path": f"/examples/{i}{e['path']}", "message": f"example {i}: {e['message']}"}
        for i, example in enumerate(examples)
        for e in errors_of(validator, example)
    ]


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    return jsonschema_rs.Draft6Validator(dict(schema), validate_formats=True)


def compile_batch(schema: Mapping[str, Any]) -> Validator | None:
    """A validator of a whole batch (an array of records) in one call: one crossing into
    Rust instead of one a record. None for a schema with a `$ref` (under a wrapping array
    schema, its pointers would resolve against another root)."""
    if b'"$ref"' in orjson.dumps(schema):
        return None
    items = {key: value for key, value in schema.items() if key != "$schema"}
    return compile_schema({"type": "array", "items": items})


def errors_of(validator: Validator, record: Any) -> Iterator[dict[str, str]]:
    """Every error of one record: JSON Pointer, keyword and message.

    For `required` the path points at the missing member, and `additionalProperties`
    answers one error per unexpected member, at that member: where a reader looks.
    """
    for error in validator.iter_errors(record):
        path = list(error.instance_path)
        keyword = next(
            (str(p) for p in reversed(error.schema_path) if isinstance(p, str)), error.kind.name
        )
        if keyword == "required":
            path.append(error.kind.property)  # type: ignore[attr-defined]
        elif error.kind.name == "additionalProperties":
            for name in error.kind.as_dict()["unexpected"]:
                yield {
                    "path": pointer([*path, name]),
                    "keyword": keyword,
                    "message": f"{name!r} is not a field of this schema",
                }
            continue
        yield {"path": pointer(path), "keyword": keyword, "message": error.message}


def batch_errors(
    validator: Validator,
    records: list[Any],
    *,
    batch: Validator | None = None,
    limit: int = MAX_LISTED_ERRORS,
) -> tuple[int, list[dict[str, Any]]]:
    """(how many errors, the first `limit` of them with their record index). With
    `compile_batch`'s validator, a valid batch is told in one call."""
    if batch is not None and batch.is_valid(records):
        return 0, []
    count = 0
    listed: list[dict[str, Any]] = []
    is_valid = validator.is_valid
    for index, record in enumerate(records):
        if is_valid(record):
            continue
        for error in errors_of(validator, record):
            count += 1
            if len(listed) < limit:
                listed.append({"record": index, **error})
    return count, listed
