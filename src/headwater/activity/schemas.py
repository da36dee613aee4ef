"""Activity log API models (interface document 2.6, 2.7, 4.8; contract section 8)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, Field, WithJsonSchema

from headwater.kit.clock import InputDateTime, Timestamp
from headwater.kit.pagination import MAX_PAGE
from headwater.kit.schemas import Input, JSONInt, Output

ResourceType = Literal[
    "workflow_category",
    "workflow_template",
    "workflow",
    "workflow_task",
    "dataset",
    "dataset_schema",
    "dataset_transforms",
    "erasure",
    "suppression",
]
Action = Literal["create", "update", "delete"]
SortField = Literal["timestamp", "resource_type", "action"]
MAX_IN = 100


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return check


def _uuid(value: Any) -> uuid.UUID:
    if not isinstance(value, str):
        raise ValueError("must be a uuid string")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a uuid") from None


def _match(parse: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    """A value matched exactly, or `{"$in": [values]}`: always a tuple of values."""

    def validate(value: Any) -> tuple[Any, ...]:
        if isinstance(value, dict):
            unknown = sorted(set(value) - {"$in"})
            if unknown:
                raise ValueError(f"unknown operator {', '.join(unknown)}; use a value or $in")
            items = value.get("$in")
            if not isinstance(items, list) or not 1 <= len(items) <= MAX_IN:
                raise ValueError(f"$in takes a list of 1 to {MAX_IN} values")
            return tuple(parse(item) for item in items)
        return (parse(value),)

    return validate


def _match_schema(item: dict[str, Any], example: str) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "oneOf": [
                item,
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["$in"],
                    "properties": {
                        "$in": {"type": "array", "items": item, "minItems": 1, "maxItems": MAX_IN}
                    },
                },
            ],
            "examples": [example, {"$in": [example]}],
        }
    )


_UUID_SCHEMA = {"type": "string", "format": "uuid"}
TypeMatch = Annotated[
    tuple[str, ...],
    BeforeValidator(_match(_one_of(get_args(ResourceType)))),
    _match_schema({"type": "string", "enum": list(get_args(ResourceType))}, "workflow"),
]
ActionMatch = Annotated[
    tuple[str, ...],
    BeforeValidator(_match(_one_of(get_args(Action)))),
    _match_schema({"type": "string", "enum": list(get_args(Action))}, "update"),
]
UuidMatch = Annotated[
    tuple[uuid.UUID, ...],
    BeforeValidator(_match(_uuid)),
    _match_schema(_UUID_SCHEMA, "3f2b1c9e-8a47-4d5b-9c61-0e7f2a4b8d13"),
]


class TimestampRange(Input):
    """Bounds on `timestamp`, exact to the millisecond; combine as needed."""

    gt: InputDateTime | None = Field(None, alias="$gt")
    gte: InputDateTime | None = Field(None, alias="$gte")
    lt: InputDateTime | None = Field(None, alias="$lt")
    lte: InputDateTime | None = Field(None, alias="$lte")


class ActivityFilter(Input):
    resource_type: TypeMatch | None = None
    resource_id: UuidMatch | None = None
    author_id: UuidMatch | None = None
    action: ActionMatch | None = None
    timestamp: TimestampRange | None = Field(
        None, examples=[{"$gt": "2026-11-01T00:00:00.000Z", "$lt": "2026-12-01T00:00:00.000Z"}]
    )


class ActivitySearch(Input):
    page: JSONInt = Field(0, ge=0, le=MAX_PAGE, description="Page number, from 0.", examples=[0])
    page_size: JSONInt = Field(
        20, ge=1, le=100, description="Entries per page, 1-100.", examples=[20]
    )
    sort_by: SortField = Field("timestamp", description="Ties are broken by log order.")
    sort_direction: Literal["asc", "desc"] = "desc"
    filter: ActivityFilter | None = None

    model_config = Input.model_config | {
        "json_schema_extra": {
            "examples": [
                {
                    "page": 0,
                    "page_size": 20,
                    "sort_by": "timestamp",
                    "sort_direction": "desc",
                    "filter": {
                        "resource_type": "workflow",
                        "action": "update",
                        "timestamp": {
                            "$gt": "2026-11-01T00:00:00.000Z",
                            "$lt": "2026-12-01T00:00:00.000Z",
                        },
                    },
                }
            ]
        }
    }


class ActivityEntryRead(Output):
    id: uuid.UUID
    resource_type: str = Field(examples=["workflow"])
    resource_id: uuid.UUID
    author_id: uuid.UUID
    action: str = Field(examples=["update"])
    before: dict[str, Any] | None = Field(description="The resource before; null on create.")
    after: dict[str, Any] | None = Field(description="The resource after; null on delete.")
    timestamp: Timestamp


class CheckpointRead(Output):
    company_id: uuid.UUID
    count: int
    hash: str
