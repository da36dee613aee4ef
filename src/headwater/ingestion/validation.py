"""Draft-06 schemas: checking a schema before it is registered, and validating records.

Records are validated by jsonschema-rs (chosen by `bench/validate.py`): a compiled
validator answers `is_valid` for a good record without building any error, and lists
every error with its path for a bad one. It is always the draft-06 validator, whatever
`$schema` says or omits. Schemas are checked against the draft-06 meta-schema with the
reference implementation (`jsonschema`), which lists every problem, not the first.

A schema is self-contained (contract section 15): a `$ref` may only point inside it
(`#...`), and every validator is compiled with a retriever that refuses, so nothing
outside the schema is ever fetched or read, at registration or later. What one schema
can cost a push is bounded: `enum` lists, subschema count and regex backtracking.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema_rs
import orjson

from headwater.kit import strictjson
from headwater.kit.strictjson import pointer

DRAFT6 = "http://json-schema.org/draft-06/schema#"
DRAFT6_IDS = frozenset({DRAFT6, DRAFT6.rstrip("#")})
MAX_LISTED_ERRORS = 100
MAX_ENUM_VALUES = 10_000
MAX_SUBSCHEMAS = 10_000
REGEX_BACKTRACK_LIMIT = 100_000

# Members of a schema object whose values are data, not subschemas: a `$ref` there is a value.
_DATA_KEYWORDS = frozenset({"enum", "const", "examples", "default"})
# Members whose values map names (of properties, definitions) to subschemas.
_NAMED_SUBSCHEMAS = frozenset({"properties", "patternProperties", "definitions", "dependencies"})

Validator = jsonschema_rs.Draft6Validator


@functools.cache
def _meta() -> Any:
    """Draft-06's meta-schema checker (jsonschema, imported here: only a schema being
    registered needs it, and it is 0.04 s of every process's start)."""
    import jsonschema

    return jsonschema.Draft6Validator(
        jsonschema.Draft6Validator.META_SCHEMA, format_checker=jsonschema.FormatChecker()
    )


def schema_problems(schema: Any) -> list[dict[str, str]]:
    """Why `schema` cannot be registered: not an object, another draft, not valid draft-06,
    or an item of its `examples` that fails it. Empty when it can be."""
    if not isinstance(schema, dict):
        return [{"path": "", "message": "a schema must be a JSON object"}]
    bounded = list(_unbounded(schema))
    if bounded:
        return bounded
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
        for e in sorted(_meta().iter_errors(schema), key=lambda e: list(map(str, e.path)))
    ]
    if problems:
        return problems
    try:
        validator = compile_schema(schema)
    except SchemaUnusable as exc:
        return [{"path": "", "message": str(exc)}]
    examples = schema.get("examples", [])
    if not isinstance(examples, list):
        return []
    return [
        {"path": f"/examples/{i}{e['path']}", "message": f"example {i}: {e['message']}"}
        for i, example in enumerate(examples)
        for e in errors_of(validator, example)
    ]


class SchemaUnusable(ValueError):
    """A stored or offered schema that cannot be compiled (the message says why)."""


def _refuse(uri: str) -> Any:
    raise LookupError(f"{uri} is outside the schema; only references inside it (#...) resolve")


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """The draft-06 validator of `schema`; it can never resolve anything outside it."""
    try:
        return jsonschema_rs.Draft6Validator(
            dict(schema),
            validate_formats=True,
            retriever=_refuse,
            pattern_options=jsonschema_rs.FancyRegexOptions(backtrack_limit=REGEX_BACKTRACK_LIMIT),
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SchemaUnusable(str(exc).splitlines()[0]) from None


def _unbounded(schema: dict[str, Any]) -> Iterator[dict[str, str]]:
    """A problem for each `$ref` that points outside the schema and each part over the
    cost bounds. Every object in a subschema position is walked, unknown keywords too
    (a local pointer can reach into them); only data keywords' values are skipped."""
    count = 0
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        count += 1
        if count > MAX_SUBSCHEMAS:
            yield {"path": "", "message": f"a schema may hold at most {MAX_SUBSCHEMAS} subschemas"}
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            yield {
                "path": pointer([*path, "$ref"]),
                "message": f"{ref!r} points outside the schema; "
                "a $ref may only point inside it (#/definitions/...)",
            }
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > MAX_ENUM_VALUES:
            yield {
                "path": pointer([*path, "enum"]),
                "message": f"an enum may list at most {MAX_ENUM_VALUES} values, "
                f"this one lists {len(enum)}",
            }
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
                stack.extend((sub, (*path, key, name)) for name, sub in value.items())
            else:
                stack.append((value, (*path, key)))


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
        message = error.message
        if keyword == "format":
            message = _format_message(error.instance, error.kind.as_dict().get("format"))
        yield {"path": pointer(path), "keyword": keyword, "message": message}


NUL_MESSAGE = "holds a NUL (U+0000) character, which cannot be stored"


def character_errors(record: Any) -> Iterator[dict[str, str]]:
    """An error (keyword `characters`) at each member name or string holding U+0000."""
    for path, in_name in strictjson.nul_paths(record):
        message = "the member name " + NUL_MESSAGE if in_name else NUL_MESSAGE
        yield {"path": pointer(path), "keyword": "characters", "message": message}


_FORMAT_NAMES = {
    "email": "an email address",
    "date-time": "a date-time (ISO 8601 with an offset, e.g. 2026-11-22T09:30:00Z)",
    "date": "a date (ISO 8601, e.g. 2026-11-22)",
    "time": "a time (ISO 8601 with an offset, e.g. 09:30:00Z)",
    "uri": "an absolute URI",
    "uri-reference": "a URI reference",
    "hostname": "a hostname",
    "ipv4": "an IPv4 address",
    "ipv6": "an IPv6 address",
    "uuid": "a UUID",
}


def _format_message(value: Any, name: Any) -> str:
    """`"x" is not an email address`, where the validator says `is not a "email"`."""
    shown = orjson.dumps(value).decode() if not isinstance(value, bytes) else repr(value)
    wanted = _FORMAT_NAMES.get(str(name), f"of the format {name!r}")
    return f"{shown} is not {wanted}"
